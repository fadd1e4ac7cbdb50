package proxies_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// The budget of every client in these tests: 3 requests, then one more
// every 20 minutes, so no token comes back while a test runs.
const (
	budget = 3
	per    = time.Hour
	secret = "proxy-test-internal-token-0123456789"
)

// The addresses the configs in configs/ are written with; each test
// replaces them by free ports.
const (
	confListen   = "127.0.0.1:8080" // the proxy
	confListen2  = "127.0.0.1:8081" // a second proxy in a chain
	confListen6  = "[::1]:8080"     // the proxy, IPv6
	confUpstream = "127.0.0.1:8000" // the app
	confSocket   = "/run/app/app.sock"
)

// need fails (under CI=true) or skips the test when the binary is missing.
func need(t *testing.T, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		p, err = exec.LookPath(filepath.Join("/usr/sbin", bin)) // not in every user's PATH
	}
	if err != nil {
		msg := fmt.Sprintf("%s not found: install it (Debian/Ubuntu: apt-get install -y %s)", bin, pkg)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI requires the real-proxy tests")
		}
		t.Skip(msg)
	}
	return p
}

// Ports for the proxies, which bind them after freeAddr has closed its
// probe: taken in turn from a range below Linux's ephemeral ports (32768 up),
// so that no two proxies of this process, and no outgoing connection, are
// handed the same port between the probe and the proxy's bind (port 0 could
// return a port just freed, even twice in a row).
var (
	portMu   sync.Mutex
	nextPort = 20000 + os.Getpid()%5000
)

// freeAddr returns a loopback address ("127.0.0.1:port" or "[::1]:port")
// that was free a moment ago and that no other freeAddr call of this
// process returns.
func freeAddr(t *testing.T, host string) string {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 5000 {
		port := nextPort
		nextPort++
		if nextPort >= 30000 {
			nextPort = 20000
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return addr
	}
	t.Fatal("no free port in 20000-29999")
	return ""
}

// config reads configs/name and replaces the addresses it is written with.
func config(t *testing.T, name string, repl ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer(repl...).Replace(string(b))
}

// app is the upstream: a net/http server with a Limiter in front of a
// handler that answers 200 "ok". Every decision is recorded by the value
// of the request's X-Test-ID header.
type app struct {
	addr string // host:port, or the socket path
	mu   sync.Mutex
	seen map[string]seen
}

type seen struct {
	d   addrlimit.Decision
	xff []string // the X-Forwarded-For lines the app received
}

// startApp serves the app on l until the test ends, keyed by kf (nil: the
// default key).
func startApp(t *testing.T, l net.Listener, kf addrlimit.KeyFunc) *app {
	t.Helper()
	a := &app{addr: l.Addr().String(), seen: map[string]seen{}}
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	opts := []addrlimit.Option{
		addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(ctx context.Context, d addrlimit.Decision) {
			r := ctx.Value(requestKey{}).(*http.Request) // observers get the request's context
			a.mu.Lock()
			defer a.mu.Unlock()
			a.seen[r.Header.Get("X-Test-ID")] = seen{d, r.Header.Values("X-Forwarded-For")}
		}),
	}
	if kf != nil {
		opts = append(opts, addrlimit.WithKeyFunc(kf))
	}
	lim, err := addrlimit.New(budget, per, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: withRequest(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "ok")
		}))),
		ReadHeaderTimeout: time.Minute,
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

// requestKey is the context key under which withRequest puts the request.
type requestKey struct{}

// withRequest puts each request in its own context, where the observer
// finds it.
func withRequest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestKey{}, r)))
	})
}

// tcpApp starts the app on a free loopback port.
func tcpApp(t *testing.T, kf addrlimit.KeyFunc) *app {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startApp(t, l, kf)
}

func trusted(t *testing.T, header string, ranges ...string) addrlimit.KeyFunc {
	t.Helper()
	var ps []netip.Prefix
	for _, r := range ranges {
		ps = append(ps, netip.MustParsePrefix(r))
	}
	proxies, err := addrlimit.NewTrustedProxies(header, ps...)
	if err != nil {
		t.Fatal(err)
	}
	return proxies.Key
}

// decision returns what the app decided for the request with X-Test-ID id.
func (a *app) decision(t *testing.T, id string) seen {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.seen[id]
	if !ok {
		t.Fatalf("request %s never reached the limiter", id)
	}
	return s
}

// proc is a proxy process in its own process group.
type proc struct {
	cmd    *exec.Cmd
	out    *strings.Builder
	exited chan struct{}
}

// start runs the command until the test ends and waits until it accepts
// connections on each of addrs.
func start(t *testing.T, dir string, env []string, name string, args []string, addrs ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: out}, &lockedWriter{w: out}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // nginx forks workers
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // workers that outlived their master
		<-p.exited
	})
	for _, addr := range addrs {
		p.waitListening(t, addr)
	}
	return p
}

// waitListening polls addr until it accepts a connection; it fails the test
// if the process exits first, or after a minute.
func (p *proc) waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before listening on %s:\n%s", p.cmd.Path, addr, p.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s after a minute:\n%s", p.cmd.Path, addr, p.output())
		}
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(filepath.Join(p.cmd.Dir, "error.log"))
	return string(b) + p.out.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// startNginx runs nginx with http-level config conf (server blocks, maps)
// and waits until it listens on addrs. As root, nginx runs its worker as
// nobody (its default), as the Debian package runs it as www-data.
func startNginx(t *testing.T, conf string, addrs ...string) *proc {
	t.Helper()
	bin := need(t, "nginx", "nginx")
	dir := t.TempDir()
	var user string
	if os.Geteuid() == 0 {
		user = "user nobody " + nobodyGroup(t) + ";"
	}
	full := fmt.Sprintf(`%s
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
%[3]s
}
`, user, dir, conf)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	return start(t, dir, nil, bin, []string{"-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off; master_process on;"}, addrs...)
}

// nobodyGroup is the name of the primary group of the user nobody.
func nobodyGroup(t *testing.T) string {
	t.Helper()
	gid, _ := nobodyIDs(t)
	b, err := os.ReadFile("/etc/group")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[2] == strconv.Itoa(gid) {
			return f[0]
		}
	}
	t.Fatalf("no group %d in /etc/group", gid)
	return ""
}

// nobodyIDs returns the primary group and user id of nobody.
func nobodyIDs(t *testing.T) (gid, uid int) {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 3 && f[0] == "nobody" {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 == nil && err2 == nil {
				return gid, uid
			}
		}
	}
	t.Fatal("no user nobody in /etc/passwd")
	return 0, 0
}

// startHAProxy runs haproxy with the frontends and backends in conf.
func startHAProxy(t *testing.T, conf string, addrs ...string) *proc {
	t.Helper()
	bin := need(t, "haproxy", "haproxy")
	dir := t.TempDir()
	full := `global
    log stderr format raw local0 warning
defaults
    mode http
    log global
    timeout connect 10s
    timeout client 1m
    timeout server 1m
` + conf
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	return start(t, dir, nil, bin, []string{"-f", path, "-db"}, addrs...)
}

// startCaddy runs caddy with the site blocks in conf, admin endpoint off,
// no automatic HTTPS, and its storage and home in the test's directory.
func startCaddy(t *testing.T, conf string, addrs ...string) *proc {
	t.Helper()
	bin := need(t, "caddy", "caddy")
	dir := t.TempDir()
	full := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %s
}

%s`, filepath.Join(dir, "storage"), conf)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir + "/data", "XDG_CONFIG_HOME=" + dir + "/config"}
	return start(t, dir, env, bin, []string{"run", "--config", path, "--adapter", "caddyfile"}, addrs...)
}

// client returns an HTTP client whose connections come from source address src.
func client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: clientTimeout}
}

// clientTimeout only stops a test whose proxy hangs; no result depends on it.
const clientTimeout = 2 * time.Minute

// reply is what a client got.
type reply struct {
	status int
	header http.Header
}

var nextID struct {
	sync.Mutex
	n int
}

// get sends one GET to url with the headers given as name, value pairs and
// returns the reply and the X-Test-ID it carried.
func get(t *testing.T, c *http.Client, url string, header ...string) (reply, string) {
	t.Helper()
	nextID.Lock()
	nextID.n++
	id := strconv.Itoa(nextID.n)
	nextID.Unlock()
	req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-ID", id)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return reply{resp.StatusCode, resp.Header}, id
}

// forged are the headers a client sends to choose its key: every header a
// deployment might read, all naming addr.
func forged(addr string) []string {
	f := addr
	if strings.Contains(addr, ":") {
		f = `"[` + addr + `]"`
	}
	return []string{
		"X-Forwarded-For", addr,
		"X-Real-IP", addr,
		"Forwarded", "for=" + f,
		"CF-Connecting-IP", addr,
		"True-Client-IP", addr,
	}
}

// forgedAddr is the i-th address a forger names.
func forgedAddr(i int) string { return fmt.Sprintf("198.51.100.%d", i) }

// forge sends n requests from src to url, each forging a new address
// (198.51.100.1, .2, …), and returns how many were served.
func forge(t *testing.T, src, url string, n int) int {
	t.Helper()
	c := client(src)
	served := 0
	for i := 1; i <= n; i++ {
		if r, _ := get(t, c, url, forged(forgedAddr(i))...); r.status == http.StatusOK {
			served++
		}
	}
	return served
}

// checkRow is the test of a row that works: behind the proxy at url, each
// client gets exactly its own budget, keyed by its own address; forged headers
// neither choose the key nor charge another client; the internal token
// passes through; and the 429 fields arrive intact.
func checkRow(t *testing.T, a *app, url string, clients ...string) {
	t.Helper()
	if len(clients) < 3 {
		t.Fatal("checkRow needs three clients: a forger, its victim and another one")
	}
	checkForger(t, a, url, clients[0], clients[1])
	for _, src := range clients[1:] {
		checkClient(t, a, url, src)
	}
}

// checkForger checks that a forger that names a fresh address on every
// request, and every other time its victim's, is keyed by its own address
// and served exactly its budget.
func checkForger(t *testing.T, a *app, url, forger, victim string) {
	t.Helper()
	c := client(forger)
	served := 0
	for i := 1; i <= 8; i++ {
		name := forgedAddr(i)
		if i%2 == 0 {
			name = victim
		}
		r, id := get(t, c, url, forged(name)...)
		if r.status == http.StatusOK {
			served++
		}
		if got, want := a.decision(t, id).d.Key, key(forger); got != want {
			t.Errorf("forger %s naming %s: keyed %q, want %q", forger, name, got, want)
		}
	}
	if served != budget {
		t.Errorf("forger %s: %d of 8 served, want exactly its budget %d", forger, served, budget)
	}
}

// checkClient checks that an honest client src, with a full bucket, gets
// exactly its budget keyed by its own address, the 429 fields intact, and
// that its internal token passes through.
func checkClient(t *testing.T, a *app, url, src string) {
	t.Helper()
	c := client(src)
	var statuses []int
	var last reply
	for i := range budget + 2 {
		r, id := get(t, c, url)
		statuses = append(statuses, r.status)
		s := a.decision(t, id)
		if got, want := s.d.Key, key(src); got != want {
			t.Errorf("client %s: keyed %q, want %q", src, got, want)
		}
		if s.d.Err != nil {
			t.Errorf("client %s: warning %v", src, s.d.Err)
		}
		if i == 0 {
			if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"default";r=%d;t=0`, budget-1); got != want {
				t.Errorf("client %s, first reply: RateLimit %q, want %q", src, got, want)
			}
		}
		last = r
	}
	if got, want := fmt.Sprint(statuses), fmt.Sprint(want200s(budget, 2)); got != want {
		t.Errorf("client %s: statuses %s, want %s (exactly its own budget)", src, got, want)
	}
	check429(t, src, last)

	// The internal token passes through: exempt, no quota fields.
	r, id := get(t, c, url, "Authorization", "Bearer "+secret)
	if r.status != http.StatusOK || r.header.Get("RateLimit") != "" || a.decision(t, id).d.Outcome != addrlimit.Exempt {
		t.Errorf("client %s with the internal token: %d, RateLimit %q, outcome %v; want 200, none, exempt",
			src, r.status, r.header.Get("RateLimit"), a.decision(t, id).d.Outcome)
	}
	if r, _ := get(t, c, url, "Authorization", "Bearer "+strings.ToUpper(secret)); r.status != http.StatusTooManyRequests {
		t.Errorf("client %s with a wrong token: %d, want 429", src, r.status)
	}
}

// key is the bucket key of a client address.
func key(addr string) string { return addrlimit.AddrKey(netip.MustParseAddr(addr)) }

func want200s(ok, denied int) []int {
	var s []int
	for range ok {
		s = append(s, http.StatusOK)
	}
	for range denied {
		s = append(s, http.StatusTooManyRequests)
	}
	return s
}

var rateLimitDenied = regexp.MustCompile(`^"default";r=0;t=([0-9]+)$`)

// check429 checks the fields of a 429 that went through a proxy.
func check429(t *testing.T, src string, r reply) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Errorf("client %s: last status %d, want 429", src, r.status)
		return
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	// The next token comes per/budget after the first request.
	if err != nil || ra < 1 || ra > int((per/budget)/time.Second) {
		t.Errorf("client %s: Retry-After %q, want whole seconds in [1, %d]", src, r.header.Get("Retry-After"), int((per/budget)/time.Second))
	}
	m := rateLimitDenied.FindStringSubmatch(r.header.Get("RateLimit"))
	if m == nil || m[1] != strconv.Itoa(ra) {
		t.Errorf("client %s: RateLimit %q, want r=0 and t = Retry-After (%d)", src, r.header.Get("RateLimit"), ra)
	}
	if got, want := r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"default";q=%d;w=%d`, budget, int(per/time.Second)); got != want {
		t.Errorf("client %s: RateLimit-Policy %q, want %q", src, got, want)
	}
	if got := r.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("client %s: Cache-Control %q, want no-store", src, got)
	}
}

// sharedBucket checks that the clients, all honest, are served budget
// requests between them: one bucket for all (the broken rows).
func sharedBucket(t *testing.T, url string, clients ...string) {
	t.Helper()
	served := 0
	for _, src := range clients {
		c := client(src)
		for range budget {
			if r, _ := get(t, c, url); r.status == http.StatusOK {
				served++
			}
		}
	}
	if served != budget {
		t.Errorf("%d honest clients with %d requests each: %d served, want %d (one shared bucket)", len(clients), budget, served, budget)
	}
}
