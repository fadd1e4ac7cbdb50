package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain runs the program itself when the test starts it as an instance.
func TestMain(m *testing.M) {
	if os.Getenv("DEPLOY_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

var secrets = map[string]string{
	"EDGE_SECRET":                 "edge-secret-0123456789abcdef",
	"ORCHESTRATOR_SECRET":         "orchestrator-secret-0123456789",
	"ORCHESTRATOR_SECRET_RETIRED": "orchestrator-old-secret-012345",
	"PREVIEW_GATE_SECRET":         "preview-gate-secret-0123456789",
}

// TestConfigurationErrors: the program refuses to start without the load
// balancers' ranges or a service's secret, and says which.
func TestConfigurationErrors(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if err := run(getenv, logger); err == nil || !strings.Contains(err.Error(), "TRUSTED_PROXIES is empty") {
		t.Fatalf("without TRUSTED_PROXIES: %v", err)
	}
	env["TRUSTED_PROXIES"] = "10.0.12.0/28, 10.0.13.0/33"
	if err := run(getenv, logger); err == nil || !strings.Contains(err.Error(), "TRUSTED_PROXIES") {
		t.Fatalf("with a bad range: %v", err)
	}
	env["TRUSTED_PROXIES"] = "10.0.12.0/28"
	err := run(getenv, logger)
	if err == nil || !strings.Contains(err.Error(), `"edge"`) {
		t.Fatalf("without the edge's secret: %v", err)
	}
}

// instance is one running copy of the program.
type instance struct {
	api, metrics string // base URLs
	logs         *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitUntil calls ready until it succeeds or exited is closed.
func waitUntil(t *testing.T, what string, exited <-chan struct{}, logs fmt.Stringer, ready func() error) {
	t.Helper()
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it was ready (%v):\n%s", what, err, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startRedis runs a redis-server without persistence until the test ends.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server not found; CI requires it")
		}
		t.Skip("redis-server not found (Debian: apt-get install redis-server)")
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--loglevel", "warning")
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	exited := start(t, cmd)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	waitUntil(t, "redis-server", exited, logs, func() error { return c.Ping(context.Background()).Err() })
	return addr
}

// start starts cmd, killed when the test ends; the channel is closed when
// it has exited.
func start(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return exited
}

// startInstance runs the program as a deployment would, configured by its
// environment.
func startInstance(t *testing.T, redisAddr string) *instance {
	t.Helper()
	api, metrics := freeAddr(t), freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DEPLOY_RUN_MAIN=1", "ADDR="+api, "METRICS_ADDR="+metrics, "REDIS_ADDR="+redisAddr,
		// a loaded test machine may hold a round trip past the 50 ms
		// default; the counts below are exact only without degraded
		// decisions, which the test checks.
		"REDIS_TIMEOUT=5s",
		"TRUSTED_PROXIES=127.0.0.1/32") // the test's client plays the load balancer
	for k, v := range secrets {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	in := &instance{api: "http://" + api, metrics: "http://" + metrics, logs: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = in.logs, in.logs
	exited := start(t, cmd)
	for _, addr := range []string{api, metrics} {
		waitUntil(t, "an instance", exited, in.logs, func() error {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	return in
}

// call makes one request as the load balancer forwarding client.
func call(t *testing.T, method, url, client, authorization string) *http.Response {
	t.Helper()
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Forwarded-For", client)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// scrape returns the samples of an instance's /metrics, by series.
func scrape(t *testing.T, in *instance) map[string]float64 {
	t.Helper()
	resp, err := http.Get(in.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q", line)
		}
		samples[line[:i]] = v
	}
	return samples
}

// TestTwoInstancesShareOneBudget runs the incident's setup: a real Redis,
// two instances behind a load balancer (the test's client, trusted by its
// address), the three services exempt by name, a forged token charged, a
// client's budget shared by both instances, and what /metrics and the logs
// show.
func TestTwoInstancesShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and two instances: not in -short mode")
	}
	redisAddr := startRedis(t)
	in := []*instance{startInstance(t, redisAddr), startInstance(t, redisAddr)}

	// The company's services reach the API from one shared egress address,
	// far more often than 300 a minute: exempt, on both instances.
	const egress, perService = "198.51.100.10", 150
	services := []struct{ identity, env, method, path string }{
		{"edge", "EDGE_SECRET", http.MethodGet, "/internal/domains/lookup"},
		{"orchestrator", "ORCHESTRATOR_SECRET", http.MethodPut, "/internal/agents/42/progress"},
		{"preview-gate", "PREVIEW_GATE_SECRET", http.MethodGet, "/internal/previews/7/access"},
	}
	for i := range perService {
		for _, s := range services {
			resp := call(t, s.method, in[i%2].api+s.path, egress, "Bearer "+secrets[s.env])
			if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
				t.Fatalf("%s, call %d: %d, RateLimit %q; want 200 and no quota fields (exempt)", s.identity, i+1, resp.StatusCode, resp.Header.Get("RateLimit"))
			}
		}
	}
	// A forged token from the same address is charged, on the budget the
	// exempt calls left whole, and that budget is the fleet's.
	for i, want := range []string{`"default";r=299;t=0`, `"default";r=298;t=0`} {
		resp := call(t, http.MethodPut, in[i].api+"/internal/agents/42/progress", egress, "Bearer forged-secret-0123456789abc")
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("RateLimit") != want {
			t.Fatalf("forged token on instance %d: %d, RateLimit %q; want 401 and %s", i+1, resp.StatusCode, resp.Header.Get("RateLimit"), want)
		}
	}

	// One client, alternating between the instances: 300 in all, not 300
	// from each (in-memory limiters would allow 600).
	const client, burst, refill = "203.0.113.7", 300, time.Minute / 300
	started := time.Now()
	allowed := []int{0, 0}
	var last *http.Response
	for i := 0; ; i++ {
		last = call(t, http.MethodGet, in[i%2].api+"/v1/sites", client, "")
		if last.StatusCode == http.StatusTooManyRequests {
			break
		}
		if last.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, last.StatusCode)
		}
		if allowed[i%2]++; allowed[0]+allowed[1] > 3*burst {
			t.Fatalf("%d requests allowed and none limited", allowed[0]+allowed[1])
		}
	}
	elapsed := time.Since(started)
	if last.Header.Get("Retry-After") == "" {
		t.Error("the 429 has no Retry-After")
	}
	// The orchestrator still sends a secret being retired: refused like a
	// wrong one, and named in the logs and the metrics.
	if resp := call(t, http.MethodGet, in[0].api+"/v1/sites", client, "Bearer "+secrets["ORCHESTRATOR_SECRET_RETIRED"]); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a retired secret once the budget is spent: %d, want 429", resp.StatusCode)
	}

	m := []map[string]float64{scrape(t, in[0]), scrape(t, in[1])}
	// Exact counts hold only if every decision was Redis's.
	for i := range in {
		if e := m[i][`addrlimit_store_errors_total{limiter="public"}`]; e != 0 {
			t.Fatalf("instance %d: %v store errors (a loaded machine past REDIS_TIMEOUT): the counts are not exact\n%s", i+1, e, in[i].logs)
		}
	}
	total := allowed[0] + allowed[1]
	if most := burst + int(elapsed/refill) + 1; total < burst || total > most || allowed[0] == 0 || allowed[1] == 0 {
		t.Errorf("the client got %d + %d = %d through the two instances; want %d to %d in all, from both", allowed[0], allowed[1], total, burst, most)
	}
	for _, s := range services {
		series := `addrlimit_identity_exempt_total{identity="` + s.identity + `",limiter="public"}`
		if got := m[0][series] + m[1][series]; got != perService {
			t.Errorf("%s: %v + %v = %v, want %d", series, m[0][series], m[1][series], got, perService)
		}
	}
	if got := m[0][`addrlimit_identity_retired_token_limited_total{identity="orchestrator",limiter="public"}`]; got != 1 {
		t.Errorf("the orchestrator's retired secret limited: %v on /metrics, want 1", got)
	}
	logs := in[0].logs.String() + in[1].logs.String()
	for _, want := range []string{
		`"msg":"addrlimit: request limited"`,
		`"key":"203.0.113.7"`,
		`"msg":"addrlimit: request with a retired internal token limited"`,
		`"identity":"orchestrator"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the instances' logs lack %s:\n%s", want, logs)
		}
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the logs show a secret")
		}
	}
}
