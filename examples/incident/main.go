// Command incident replays, with real HTTP clients on loopback, the incident
// addrlimit was built from: an API limited to 300 requests per minute per
// address starts answering its own services with 429, because they all reach
// it from one shared egress address.
//
//	go run ./examples/incident
//
// Phase 1 runs the limiter as it was (no exemption), phase 2 with the internal
// token exempt, phase 3 shows what the logs and counters said. Every figure is
// counted from real responses; the program exits non-zero if an expectation
// fails, so it doubles as an end-to-end test. It needs Linux (it binds
// clients to 127.0.0.2 and 127.0.0.3, which Linux routes to loopback).
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
)

const (
	limit  = 300
	period = time.Minute
	secret = "demo-internal-token-7f3a9c2e41b8d605" // in production: from your secret store
)

// Addresses. Every internal service reaches the API from one egress address.
const (
	egressAddr = "127.0.0.1"
	scriptAddr = "127.0.0.2" // a public script with an address of its own
	forgerAddr = "127.0.0.3" // someone who guessed at the token
)

// callType is one kind of internal call, with a minute's worth of load.
type callType struct {
	name, method, path, meaning string
	perMinute                   int
}

var internalCalls = []callType{
	{"edge: custom-domain lookup", "GET", "/internal/domains/lookup", "a visitor's site does not open", 420},
	{"orchestrator: save agent progress", "PUT", "/internal/agents/42/progress", "an agent's progress is not saved", 260},
	{"gate: preview access check", "GET", "/internal/previews/7/access", "a preview does not load", 180},
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "\nFAILED:", err)
		os.Exit(1)
	}
}

// phase is one configuration of the API under test.
type phase struct {
	lim  *addrlimit.Limiter
	logs *bytes.Buffer
	url  string
	stop func()
}

func startAPI(exempt bool) (*phase, error) {
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		return nil, err
	}
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	lo, err := addrlimit.NewLogObserver(logger, time.Minute)
	if err != nil {
		return nil, err
	}
	opts := []addrlimit.Option{addrlimit.WithObserver(lo.Observe)}
	if exempt {
		opts = append(opts, addrlimit.WithInternalToken(tok)) // the fix: identity, not address
	}
	lim, err := addrlimit.New(limit, period, opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	internal := tok.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	mux.Handle("/internal/", internal) // the same check guards internal routes (401)
	mux.HandleFunc("GET /v1/sites", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "[]") })

	ln, err := net.Listen("tcp", egressAddr+":0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: lim.Handler(mux), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return &phase{lim: lim, logs: logs, url: "http://" + ln.Addr().String(),
		stop: func() { srv.Close() }}, nil
}

// client returns an HTTP client whose connections come from src.
func client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
}

// send makes n requests (several at once) and counts the status codes.
func send(c *http.Client, method, url, auth string, n int) (map[int]int, error) {
	var mu sync.Mutex
	codes := map[int]int{}
	var firstErr error
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for range jobs {
				req, _ := http.NewRequest(method, url, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := c.Do(req)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else {
					codes[resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return codes, firstErr
}

// internalMinute sends a busy minute of internal traffic from the egress
// address, interleaving the three call types, all with the valid token.
func internalMinute(p *phase) (map[string]map[int]int, error) {
	c := client(egressAddr)
	out := map[string]map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(internalCalls))
	for _, ct := range internalCalls {
		wg.Go(func() {
			codes, err := send(c, ct.method, p.url+ct.path, "Bearer "+secret, ct.perMinute)
			if err != nil {
				errs <- err
			}
			mu.Lock()
			out[ct.name] = codes
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	return out, <-errs
}

type checker struct {
	w      io.Writer
	failed []string
}

func (c *checker) expect(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		c.failed = append(c.failed, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(c.w, "  [%s] %s\n", mark, fmt.Sprintf(format, args...))
}

func run(w io.Writer) error {
	check := &checker{w: w}
	fmt.Fprintf(w, "addrlimit demo: an API limited to %d requests per minute per address.\n", limit)
	fmt.Fprintf(w, "Internal services (edge, orchestrator, preview gate) all reach it from %s.\n", egressAddr)
	fmt.Fprintf(w, "The policy is the real one (300 at once, then one more every 200 ms); a busy\nminute of traffic is sent as fast as the clients can, in about a second.\n")

	// Phase 1: before the fix.
	fmt.Fprintf(w, "\n== Phase 1: before the fix (the limiter sees only addresses)\n\n")
	p1, err := startAPI(false)
	if err != nil {
		return err
	}
	res1, err := internalMinute(p1)
	if err != nil {
		return err
	}
	p1.stop()
	fmt.Fprintf(w, "  %-36s %6s %6s  %s\n", "internal call from "+egressAddr, "200", "429", "what a 429 means to a user")
	total429 := 0
	for _, ct := range internalCalls {
		codes := res1[ct.name]
		total429 += codes[429]
		fmt.Fprintf(w, "  %-36s %6d %6d  %s\n", ct.name, codes[200], codes[429], ct.meaning)
	}
	check.expect(total429 > 0, "internal services were throttled: %d of their calls got 429", total429)

	// Phase 2: after the fix.
	fmt.Fprintf(w, "\n== Phase 2: after the fix (requests with the internal token are exempt)\n\n")
	p2, err := startAPI(true)
	if err != nil {
		return err
	}
	res2, err := internalMinute(p2)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %-36s %6s %6s\n", "internal call from "+egressAddr, "200", "429")
	internal429 := 0
	for _, ct := range internalCalls {
		codes := res2[ct.name]
		internal429 += codes[429]
		fmt.Fprintf(w, "  %-36s %6d %6d\n", ct.name, codes[200], codes[429])
	}
	check.expect(internal429 == 0, "internal calls throttled: %d", internal429)

	// A public script from its own address: still exactly 300 at once.
	start := time.Now()
	script, err := send(client(scriptAddr), "GET", p2.url+"/v1/sites", "", 400)
	if err != nil {
		return err
	}
	refills := int(time.Since(start) / (period / limit)) // tokens that refilled while it ran
	fmt.Fprintf(w, "\n  public script from %s, 400 requests: %d allowed, %d limited\n", scriptAddr, script[200], script[429])
	check.expect(script[200] >= limit && script[200] <= limit+refills+1,
		"the script got its burst of %d plus %d refilled during the run: %d allowed", limit, refills, script[200])

	// Someone with a forged token: counted like anyone, and 401 on internal routes.
	start = time.Now()
	forged, err := send(client(forgerAddr), "PUT", p2.url+"/internal/agents/42/progress", "Bearer forged-token-0000000000000000", 400)
	if err != nil {
		return err
	}
	refills = int(time.Since(start) / (period / limit))
	fmt.Fprintf(w, "  forged token from %s, 400 requests to an internal route: %d answered 401, %d limited (429), %d 200\n",
		forgerAddr, forged[401], forged[429], forged[200])
	check.expect(forged[200] == 0, "no forged request reached the internal handler")
	check.expect(forged[401] >= limit && forged[401] <= limit+refills+1 && forged[429] == 400-forged[401],
		"the forged token gets no pass: limited like any other request after %d", limit)
	p2.stop()

	// Phase 3: who got throttled.
	fmt.Fprintf(w, "\n== Phase 3: who got throttled (what the logs and counters showed)\n\n")
	for i, p := range []*phase{p1, p2} {
		s := p.lim.Stats()
		fmt.Fprintf(w, "  phase %d  Stats: allowed=%d limited=%d exempt=%d credentialed_limited=%d\n",
			i+1, s.Allowed, s.Limited, s.Exempt, s.CredentialedLimited)
	}
	fmt.Fprintf(w, "\n  phase 1 log (one line per key per minute; no token is ever logged):\n")
	lines1 := logLines(p1.logs)
	printLines(w, lines1)
	fmt.Fprintf(w, "\n  phase 2 log:\n")
	lines2 := logLines(p2.logs)
	printLines(w, lines2)
	s1, s2 := p1.lim.Stats(), p2.lim.Stats()
	check.expect(s1.CredentialedLimited == uint64(total429),
		"phase 1: every throttled internal call carried credentials (%d): the alert addrlimit_credentialed_limited_total > 0 fires", s1.CredentialedLimited)
	check.expect(containsAll(lines1, "key="+egressAddr, "credentialed=true"),
		"phase 1: the log names the shared egress address with credentialed=true: your own services")
	check.expect(!containsAny(lines2, "key="+egressAddr), "phase 2: the egress address is gone from the log")
	check.expect(containsAll(lines2, "key="+forgerAddr, "credentialed=true"),
		"phase 2: the forged token shows up as credentialed from %s — not your egress", forgerAddr)
	check.expect(!containsAny(append(lines1, lines2...), secret, "forged-token"), "no token appears in any log line")
	check.expect(s2.Exempt == uint64(sum(internalCalls)), "phase 2: %d internal calls exempt, none counted", s2.Exempt)

	if len(check.failed) > 0 {
		return errors.New(strings.Join(check.failed, "; "))
	}
	fmt.Fprintf(w, "\nAll expectations held.\n")
	return nil
}

func sum(cts []callType) int {
	n := 0
	for _, ct := range cts {
		n += ct.perMinute
	}
	return n
}

func logLines(b *bytes.Buffer) []string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	sort.Strings(lines)
	return lines
}

func printLines(w io.Writer, lines []string) {
	for _, l := range lines {
		if l != "" {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

func containsAll(lines []string, subs ...string) bool {
	for _, l := range lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return true
		}
	}
	return false
}

func containsAny(lines []string, subs ...string) bool {
	for _, l := range lines {
		for _, s := range subs {
			if strings.Contains(l, s) {
				return true
			}
		}
	}
	return false
}

// lockedWriter serialises writes from concurrent handlers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
