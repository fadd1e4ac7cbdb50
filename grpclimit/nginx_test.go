package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// nginxInFront runs the real nginx with one server block, listening for
// h2c on a free loopback port, whose location / is given by location
// (%s: the app's address), in front of a health server limited by gl. It
// returns nginx's address. Under CI=true a missing nginx fails the test.
func nginxInFront(t *testing.T, gl *grpclimit.Interceptor, location string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/nginx")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("nginx not found; CI requires the real-proxy tests (apt-get install -y nginx)")
		}
		t.Skip("nginx not found (apt-get install -y nginx)")
	}
	app := serveHealth(t, gl)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	usr := ""
	if os.Geteuid() == 0 { // nginx's default group "nobody" does not exist on Debian
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		g, err := user.LookupGroupId(u.Gid)
		if err != nil {
			t.Fatal(err)
		}
		usr = "user nobody " + g.Name + ";"
	}
	conf := fmt.Sprintf(`%s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;
worker_processes 1;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    server {
        listen %[3]s http2;
        location / {
            %[4]s
        }
    }
}
`, usr, dir, listen, fmt.Sprintf(location, app))
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off; master_process on;")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // nginx forks a worker
	out, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		out.Close()
	})
	for deadline := time.Now().Add(time.Minute); ; {
		if c, err := net.Dial("tcp", listen); err == nil {
			c.Close()
			return listen
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited before listening:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("nginx does not listen after a minute")
		}
	}
}

// clientFrom returns a health client of target whose connection comes from
// source address src.
func clientFrom(t *testing.T, target, src string) healthpb.HealthClient {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	conn, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// keysBehindNginx sends, through nginx with location, one call from an
// honest client at 127.0.0.2 and calls from a forger at 127.0.0.9 that name
// a fresh address in x-forwarded-for each time; it returns the keys the
// Limiter charged them to.
func keysBehindNginx(t *testing.T, location string) (honest string, forger []string) {
	t.Helper()
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	lim, obs := newLimiter(t, 3, time.Hour)
	gl, err := grpclimit.New(lim, grpclimit.WithTrustedProxies(tp))
	if err != nil {
		t.Fatal(err)
	}
	addr := nginxInFront(t, gl, location)
	_, err = check(clientFrom(t, addr, "127.0.0.2"), context.Background())
	wantCode(t, err, codes.OK, "honest client through nginx")
	honest = obs.last(t).d.Key
	f := clientFrom(t, addr, "127.0.0.9")
	for i := 1; i <= 3; i++ {
		_, err = check(f, withMD("x-forwarded-for", fmt.Sprintf("198.51.100.%d", i)))
		wantCode(t, err, codes.OK, "forger through nginx")
		forger = append(forger, obs.last(t).d.Key)
	}
	return honest, forger
}

// nginx's grpc_pass ignores proxy_set_header, the line every HTTP row of
// "Behind a proxy" uses: the client's own x-forwarded-for reaches the app
// unchanged, so behind that config a forger chooses its key and honest
// clients share nginx's bucket.
func TestNginxGRPCPassIgnoresProxySetHeader(t *testing.T) {
	honest, forger := keysBehindNginx(t, `grpc_pass grpc://%s;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; # ignored by grpc_pass`)
	if honest != "127.0.0.1" {
		t.Errorf("honest client: keyed %q, want nginx's own 127.0.0.1 (no header reached the app)", honest)
	}
	for i, k := range forger {
		if want := fmt.Sprintf("198.51.100.%d", i+1); k != want {
			t.Errorf("forger call %d: keyed %q, want the forged %s (it chooses its key)", i+1, k, want)
		}
	}
}

// The fix: grpc_set_header, grpc_pass's own directive.
func TestNginxGRPCPassWithGRPCSetHeader(t *testing.T) {
	honest, forger := keysBehindNginx(t, `grpc_pass grpc://%s;
            grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`)
	if honest != "127.0.0.2" {
		t.Errorf("honest client: keyed %q, want its own 127.0.0.2", honest)
	}
	for i, k := range forger {
		if k != "127.0.0.9" {
			t.Errorf("forger call %d: keyed %q, want its own 127.0.0.9", i+1, k)
		}
	}
}
