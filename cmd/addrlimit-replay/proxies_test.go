package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// The tests of this file put a real proxy (nginx, Caddy, HAProxy) on
// loopback in front of an application limited by addrlimit, send requests
// through it, and replay the proxy's own access log: the replayed decision
// of every request equals the application's. The application trusts the
// proxy's address and reads X-Forwarded-For; the replay reads the proxy's
// log, whose remote address is the client, and trusts nothing. Budgets are
// 3 per hour, so no token comes back while a test runs and the decisions do
// not depend on timing.

const proxySecret = "replay-proxy-test-internal-token-0123456789"

// needBinary fails under CI=true, and skips elsewhere, when bin is missing.
func needBinary(t *testing.T, bin string) string {
	t.Helper()
	for _, p := range []string{bin, "/usr/sbin/" + bin} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := bin + " not found (Debian: apt-get install -y " + bin + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI requires the real-proxy tests")
	}
	t.Skip(msg)
	return ""
}

var (
	portMu   sync.Mutex
	nextPort = 30000 + os.Getpid()%2000 // below Linux's ephemeral range; examples/proxies uses 20000-29999
)

// freePort returns a loopback address that was free a moment ago and that
// this process hands out once.
func freePort(t *testing.T) string {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 2000 {
		addr := "127.0.0.1:" + strconv.Itoa(nextPort)
		if nextPort++; nextPort >= 32000 {
			nextPort = 30000
		}
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port in 30000-31999")
	return ""
}

// runProxy runs bin with args in dir (its own process group) until the test
// ends, writing its output to dir/output.log, and waits until it accepts
// connections on addr.
func runProxy(t *testing.T, dir, addr, bin string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		out.Close()
	})
	for deadline := time.Now().Add(time.Minute); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("%s exited before listening on %s:\n%s", bin, addr, b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s after a minute", bin, addr)
		}
	}
}

// proxiedApp is the application: a Limiter of 3 per hour behind trusted
// proxies at 127.0.0.1, with the internal token, recording each decision
// by request path.
type proxiedApp struct {
	addr string
	mu   sync.Mutex
	seen map[string]addrlimit.Decision
}

func startProxiedApp(t *testing.T) *proxiedApp {
	t.Helper()
	a := &proxiedApp{seen: map[string]addrlimit.Decision{}}
	tok, err := addrlimit.NewInternalToken(proxySecret)
	if err != nil {
		t.Fatal(err)
	}
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithKeyFunc(proxies.Key), addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			a.mu.Lock()
			a.seen[d.Route] = d
			a.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = l.Addr().String()
	srv := &http.Server{Handler: lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })),
		ReadHeaderTimeout: time.Minute}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

// sendThrough sends n requests to the proxy at url, one at a time, from
// 127.0.0.2 to 127.0.0.4 in turn: some with a forged X-Forwarded-For, and
// (with tokens) some with the internal token or a wrong one. Each has its
// own path, /r/<i>.
func sendThrough(t *testing.T, url string, n int, tokens bool) {
	t.Helper()
	var clients []*http.Client
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		clients = append(clients, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: time.Minute})
	}
	for i := range n {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/r/%d", url, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", fmt.Sprintf("client/%d", i%5))
		switch i % 7 {
		case 1:
			req.Header.Set("X-Forwarded-For", "198.51.100.1")
		case 3:
			if tokens {
				req.Header.Set("Authorization", "Bearer "+proxySecret)
			}
		case 5:
			if tokens {
				req.Header.Set("Authorization", "Bearer wrong-token-000000000000000000")
			}
		}
		resp, err := clients[i%3].Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// replayProxyLog waits until the log at path has n lines (the proxy may
// write it after answering), replays it with args, and compares every
// replayed decision with the application's for the same path.
func replayProxyLog(t *testing.T, a *proxiedApp, path string, n int, args ...string) {
	t.Helper()
	var data []byte
	for deadline := time.Now().Add(time.Minute); ; {
		data, _ = os.ReadFile(path)
		if bytes.Count(data, []byte("\n")) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines after a minute, want %d:\n%s", path, bytes.Count(data, []byte("\n")), n, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, p, e, err := setup(append([]string{"-limit", "3", "-per", "1h"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	outcomes := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	lines := 0
	for ; sc.Scan(); lines++ {
		var rec record
		if !p.parse(sc.Bytes(), &rec) {
			t.Fatalf("log line %d does not parse: %s", lines+1, sc.Text())
		}
		got := e.decide(&rec)
		want, ok := a.seen[string(pathOnly(rec.path))]
		if !ok {
			t.Fatalf("log line %d: the application saw no %s: %s", lines+1, rec.path, sc.Text())
		}
		if got.Outcome != want.Outcome || got.Key != want.Key {
			t.Errorf("log line %d (%s): replayed %v for %q, live %v for %q", lines+1, sc.Text(), got.Outcome, got.Key, want.Outcome, want.Key)
		}
		outcomes[got.Outcome.String()]++
	}
	if lines != n || len(a.seen) != n {
		t.Fatalf("%d log lines and %d decisions, want %d", lines, len(a.seen), n)
	}
	t.Logf("%d requests replayed as the application decided them: %v", n, outcomes)
}

const proxyRequests = 42

// TestNginxLogReplayed: nginx's "main" format plus the identity its map
// derives from the verified Authorization header.
func TestNginxLogReplayed(t *testing.T) {
	bin := needBinary(t, "nginx")
	a := startProxiedApp(t)
	dir, listen := t.TempDir(), freePort(t)
	user := ""
	if os.Geteuid() == 0 { // the worker drops root, as packaged nginx does
		group := "nobody"
		if b, err := os.ReadFile("/etc/group"); err == nil && bytes.Contains(b, []byte("\nnogroup:")) {
			group = "nogroup"
		}
		user = "user nobody " + group + ";"
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`%[1]s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log;
worker_processes 1;
events { worker_connections 64; }
http {
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    map_hash_bucket_size 128;
    map $http_authorization $internal_id {
        default "-";
        "Bearer %[5]s" edge;
    }
    log_format replay '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
                      '"$http_referer" "$http_user_agent" "$http_x_forwarded_for" "$internal_id"';
    server {
        listen %[3]s;
        access_log %[2]s/access.log replay;
        location / {
            proxy_pass http://%[4]s;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
    }
}
`, user, dir, listen, a.addr, proxySecret)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, dir, listen, bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
	sendThrough(t, "http://"+listen, proxyRequests, true)
	replayProxyLog(t, a, filepath.Join(dir, "access.log"), proxyRequests, "-format", "combined", "-fwd-field", "1", "-identity-field", "2")
}

// TestCaddyLogReplayed: Caddy's JSON access log. Caddy redacts
// Authorization in its log and version 2.6 has no field to record a
// verified identity, so this test sends no token.
func TestCaddyLogReplayed(t *testing.T) {
	bin := needBinary(t, "caddy")
	a := startProxiedApp(t)
	dir, listen := t.TempDir(), freePort(t)
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %[1]s/storage
}

http://%[2]s {
	bind 127.0.0.1
	log {
		output file %[1]s/access.log
		format json
	}
	reverse_proxy %[3]s
}
`, dir, listen, a.addr)
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, dir, listen, bin, "run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
	sendThrough(t, "http://"+listen, proxyRequests, false)
	replayProxyLog(t, a, filepath.Join(dir, "access.log"), proxyRequests, "-format", "caddy")
}

// TestHAProxyLogReplayed: HAProxy with a log-format in the combined layout
// (written to its standard output), the identity set from the verified
// Authorization header.
func TestHAProxyLogReplayed(t *testing.T) {
	bin := needBinary(t, "haproxy")
	a := startProxiedApp(t)
	dir, listen := t.TempDir(), freePort(t)
	conf := fmt.Sprintf(`global
    log stdout format raw local0 info
defaults
    mode http
    log global
    timeout connect 10s
    timeout client 1m
    timeout server 1m
frontend web
    bind %[1]s
    option forwardfor
    option dontlognull
    capture request header User-Agent len 128
    http-request set-var(txn.svc) str(edge) if { req.hdr(authorization) -m str "Bearer %[3]s" }
    log-format "%%ci - - [%%T] \"%%r\" %%ST %%B \"-\" \"%%[capture.req.hdr(0)]\" \"%%[var(txn.svc)]\""
    default_backend app
backend app
    server app %[2]s
`, listen, a.addr, proxySecret)
	if err := os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, dir, listen, bin, "-f", filepath.Join(dir, "haproxy.cfg"), "-db")
	sendThrough(t, "http://"+listen, proxyRequests, true)
	// HAProxy's output has its startup messages too: keep the log lines.
	logPath := filepath.Join(dir, "access.log")
	for deadline := time.Now().Add(time.Minute); ; {
		b, _ := os.ReadFile(filepath.Join(dir, "output.log"))
		var lines []string
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, "127.0.0.") {
				lines = append(lines, l+"\n")
			}
		}
		if len(lines) >= proxyRequests || time.Now().After(deadline) {
			if err := os.WriteFile(logPath, []byte(strings.Join(lines, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	replayProxyLog(t, a, logPath, proxyRequests, "-format", "combined", "-identity-field", "1")
}
