package proxies_test

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/addrlimit/addrlimit"
)

// nginx runs configs/name in front of a; it returns the proxy's URL.
func nginx(t *testing.T, name string, a *app) string {
	t.Helper()
	listen := freeAddr(t, "127.0.0.1")
	startNginx(t, config(t, name, confListen, listen, confUpstream, a.addr), listen)
	return "http://" + listen + "/"
}

// nginx on the same host, appending to X-Forwarded-For, and the app trusting
// only the address nginx connects from.
func TestNginxXForwardedFor(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := nginx(t, "nginx-xff.conf", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")

	// A local process that connects to the app directly, from another
	// loopback address, is not trusted: forged headers are ignored.
	if got := forge(t, "127.0.0.5", "http://"+a.addr+"/", 8); got != budget {
		t.Errorf("direct local process at 127.0.0.5: %d of 8 served, want %d", got, budget)
	}
	// But 127.0.0.1 is trusted whoever connects from it: any local process
	// connecting from there names its address, like nginx does.
	if got := forge(t, "127.0.0.1", "http://"+a.addr+"/", 8); got != 8 {
		t.Errorf("direct local process at 127.0.0.1: %d of 8 served, want 8 (a trusted address names any client)", got)
	}
}

// The same nginx, but the app trusts all of 127.0.0.0/8: any local process
// (a tunnel, a sidecar) chooses its key and charges other clients.
func TestNginxTrustingLoopbackRangeLetsLocalProcessesChooseKeys(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.0/8", "::1/128"))
	url := nginx(t, "nginx-xff.conf", a)
	direct := "http://" + a.addr + "/"
	if got := forge(t, "127.0.0.5", direct, 8); got != 8 {
		t.Errorf("local process at 127.0.0.5 rotating forged addresses: %d of 8 served, want 8", got)
	}
	// It spends a victim's budget: the victim, through nginx, gets nothing.
	c := client("127.0.0.5")
	for range budget {
		get(t, c, direct, forged("127.0.0.2")...)
	}
	if r, _ := get(t, client("127.0.0.2"), url); r.status != http.StatusTooManyRequests {
		t.Errorf("victim 127.0.0.2 after a local process charged it: %d, want 429", r.status)
	}
}

// A location with its own proxy_set_header inherits none of the server's:
// nginx passes the client's X-Forwarded-For through unchanged.
func TestNginxLocationWithOwnProxySetHeaderPassesClientXFF(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := nginx(t, "nginx-location-override.conf", a)
	if got := forge(t, "127.0.0.9", url, 8); got != 8 {
		t.Errorf("forger: %d of 8 served, want 8 (it chooses its key)", got)
	}
	sharedBucket(t, url, "127.0.0.2", "127.0.0.3", "127.0.0.4")
}

// The fix: repeat the X-Forwarded-For line in every location that sets
// headers of its own.
func TestNginxLocationRepeatingXFF(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := nginx(t, "nginx-location-fixed.conf", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
}

// nginx setting X-Real-IP to the peer address.
func TestNginxXRealIP(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Real-IP", "127.0.0.1/32", "::1/128"))
	url := nginx(t, "nginx-real-ip.conf", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
}

// nginx sending Forwarded through the map the nginx documentation gives,
// which brackets and quotes IPv6 addresses.
func TestNginxForwarded(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "Forwarded", "127.0.0.1/32", "::1/128"))
	listen, listen6 := freeAddr(t, "127.0.0.1"), freeAddr(t, "::1")
	startNginx(t, config(t, "nginx-forwarded.conf", confListen, listen, confListen6, listen6, confUpstream, a.addr), listen, listen6)
	checkRow(t, a, "http://"+listen+"/", "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	// An IPv6 client is keyed by its /64, without a warning.
	checkClient(t, a, "http://"+listen6+"/", "::1")
}

// Without the map, nginx writes for=::1, which is not RFC 7239: the app
// warns and keys the request by nginx itself.
func TestNginxForwardedUnbracketedIPv6(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "Forwarded", "127.0.0.1/32", "::1/128"))
	listen, listen6 := freeAddr(t, "127.0.0.1"), freeAddr(t, "::1")
	startNginx(t, config(t, "nginx-forwarded-unbracketed.conf", confListen, listen, confListen6, listen6, confUpstream, a.addr), listen, listen6)
	_, id := get(t, client("::1"), "http://"+listen6+"/")
	s := a.decision(t, id)
	if s.d.Err == nil || s.d.Key != "127.0.0.1" {
		t.Errorf("IPv6 client: key %q, warning %v; want nginx's own key 127.0.0.1 and a warning", s.d.Key, s.d.Err)
	}
}

// nginx reaching the app over a Unix socket. The socket Go creates has mode
// 0755 (0777 less the usual umask 022): connecting needs write permission,
// so nginx's worker, which runs as another user, cannot. With 0660 and the
// worker's group it can.
func TestNginxUnixSocket(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "addrlimit-unix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // others may traverse, not list
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "app.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, l, tp.WithUnixSocket().Key)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Go created the socket with mode %v", fi.Mode().Perm())

	listen := freeAddr(t, "127.0.0.1")
	p := startNginx(t, config(t, "nginx-unix.conf", confListen, listen, confSocket, sock), listen)
	url := "http://" + listen + "/"

	if os.Geteuid() == 0 {
		// nginx's worker runs as nobody: with the socket as Go made it, it cannot connect.
		if fi.Mode().Perm()&0o002 == 0 {
			if r, _ := get(t, client("127.0.0.2"), url); r.status != http.StatusBadGateway {
				t.Errorf("socket %v, worker running as nobody: %d, want 502", fi.Mode().Perm(), r.status)
			}
			if out := p.output(); !strings.Contains(out, "Permission denied") {
				t.Errorf("nginx's error log does not say Permission denied:\n%s", out)
			}
		} else {
			t.Logf("the umask let Go create the socket writable by everyone (%v): the 502 is not tested", fi.Mode().Perm())
		}
		gid, _ := nobodyIDs(t)
		if err := os.Chown(sock, 0, gid); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("not root: nginx's worker runs as this user, so the socket's mode does not stop it; only the fixed mode is tested")
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")

	// Whoever can open the socket is trusted, and chooses its key.
	unix := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}, Timeout: clientTimeout}
	served := 0
	for i := 1; i <= 8; i++ {
		if r, _ := get(t, unix, "http://app/", forged(forgedAddr(i))...); r.status == http.StatusOK {
			served++
		}
	}
	if served != 8 {
		t.Errorf("a process that opens the socket, forging addresses: %d of 8 served, want 8", served)
	}
}
