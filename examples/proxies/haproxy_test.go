package proxies_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// haproxy runs configs/name in front of a; it returns the proxy's URL.
func haproxy(t *testing.T, name string, a *app) string {
	t.Helper()
	listen := freeAddr(t, "127.0.0.1")
	startHAProxy(t, config(t, name, confListen, listen, confUpstream, a.addr), listen)
	return "http://" + listen + "/"
}

// HAProxy's option forwardfor appends the peer address (as a header line of
// its own, after the client's).
func TestHAProxyForwardFor(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := haproxy(t, "haproxy-forwardfor.cfg", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
}

// option forwardfor if-none adds nothing when the client sent the header:
// the client chooses its key.
func TestHAProxyForwardForIfNoneLetsClientsChooseKeys(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := haproxy(t, "haproxy-forwardfor-if-none.cfg", a)
	if got := forge(t, "127.0.0.9", url, 8); got != 8 {
		t.Errorf("forger behind option forwardfor if-none: %d of 8 served, want 8", got)
	}
}

// HAProxy 2.6, Debian 12's, has no option forwarded (it came in 2.7): it
// cannot send a Forwarded header, so read X-Forwarded-For behind it.
func TestHAProxy26HasNoOptionForwarded(t *testing.T) {
	t.Parallel()
	bin := need(t, "haproxy", "haproxy")
	v, err := exec.Command(bin, "-v").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(v), "HAProxy version 2.6.") {
		t.Skipf("not HAProxy 2.6: %s", strings.SplitN(string(v), "\n", 2)[0])
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	conf := "defaults\n    mode http\nfrontend web\n    bind 127.0.0.1:8080\n    option forwarded\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-c", "-f", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown option 'forwarded'") {
		t.Errorf("haproxy -c with option forwarded: %v\n%s", err, out)
	}
}
