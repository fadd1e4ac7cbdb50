package promcollector_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	secret  = "internal-secret-0123456789abcdef"
	retired = "retired-secret-0123456789abcdef"
)

// newLimiter returns a limiter with a default policy of 3 per hour (no token
// refills during a test), a "login" policy of 2 per hour, the internal token
// secret (retired: retired) and a refund for 204 responses.
func newLimiter(t testing.TB) *addrlimit.Limiter {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	tok, err = tok.WithRetired(retired)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := addrlimit.New(3, time.Hour,
		addrlimit.WithInternalToken(tok),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "login", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Hour / 2}}}),
		addrlimit.WithRefund(func(status int) bool { return status == http.StatusNoContent }),
	)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// traffic sends known requests; the comments give the expected decisions.
func traffic(t testing.TB, lim *addrlimit.Limiter) {
	t.Helper()
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/free" {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	send := func(n int, remote, path, auth string) {
		for range n {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = remote
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	send(7, "192.0.2.1:1", "/", "")                             // 3 allowed, 4 limited
	send(4, "192.0.2.2:1", "/", "Bearer "+secret)               // 4 exempt
	send(5, "192.0.2.3:1", "/", "Bearer junk-token-0123456789") // 3 allowed, 2 limited credentialed
	send(5, "192.0.2.4:1", "/", "Bearer "+retired)              // 3 allowed, 2 limited credentialed with a retired secret
	send(4, "192.0.2.5:1", "/free", "")                         // 4 allowed and refunded: full again, so no bucket kept
	send(1, "@", "/", "")                                       // key error, charged to the unkeyed bucket: 1 allowed
	for range 3 {
		lim.AllowKey(context.Background(), "login", "user@example.com", 1) // login: 2 allowed, 1 limited
	}
	if s := lim.Stats(); s.StoreErrors != 0 {
		t.Fatalf("StoreErrors = %d: decisions were degraded, counts would be meaningless", s.StoreErrors)
	}
}

// wantSeries is the file of the series that traffic leaves behind, in the
// Prometheus text format. otelcollector's tests read it too: routed through
// OpenTelemetry's Prometheus exporter, that module must export the very same.
const wantSeries = "testdata/series.prom"

func TestCollectorCounts(t *testing.T) {
	lim := newLimiter(t)
	traffic(t, lim)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(lim, "public"))
	want, err := os.Open(wantSeries)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if err := testutil.GatherAndCompare(reg, want); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorCardinalityIsFixed(t *testing.T) {
	lim := newLimiter(t)
	c := promcollector.New(lim, "")
	// 3 series per policy (allowed, limited, keys), 1 per limit (one each
	// here) plus 9, whatever the traffic.
	if got, want := testutil.CollectAndCount(c), 3*2+2+9; got != want {
		t.Fatalf("%d series, want %d", got, want)
	}
	traffic(t, lim)
	if got, want := testutil.CollectAndCount(c), 3*2+2+9; got != want {
		t.Fatalf("after traffic: %d series, want %d", got, want)
	}
}

func TestCollectorScrapeAndLint(t *testing.T) {
	public, login := newLimiter(t), newLimiter(t)
	traffic(t, public)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(public, "public"), promcollector.New(login, "login"))

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	for _, line := range []string{
		`addrlimit_requests_total{limiter="public",outcome="limited",policy="default"} 8`,
		`addrlimit_requests_total{limiter="public",outcome="exempt",policy=""} 4`,
		`addrlimit_retired_token_limited_total{limiter="public"} 2`,
		`addrlimit_requests_total{limiter="login",outcome="limited",policy="login"} 0`,
		`addrlimit_keys{limiter="login",policy="default"} 0`,
		`addrlimit_approx_fill_ratio{limiter="login"} 0`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, body)
		}
	}
	if strings.Contains(string(body), "overflow") {
		t.Errorf("scrape still exports overflows:\n%s", body)
	}
	problems, err := testutil.CollectAndLint(promcollector.New(public, "public"))
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

func TestNewNilLimiterPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil, ...) did not panic")
		}
	}()
	promcollector.New(nil, "x")
}

// BenchmarkAllowedWithCollector shows that a registered collector costs the
// request path nothing: it reads counters at scrape time.
func BenchmarkAllowedWithCollector(b *testing.B) {
	for _, withCollector := range []bool{false, true} {
		name := map[bool]string{false: "none", true: "collector"}[withCollector]
		b.Run(name, func(b *testing.B) {
			lim, _ := addrlimit.New(1_000_000_000, time.Second, addrlimit.WithBurst(300))
			if withCollector {
				prometheus.NewRegistry().MustRegister(promcollector.New(lim, "bench"))
			}
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				clear(w.Header())
				h.ServeHTTP(w, r)
			}
		})
	}
}
