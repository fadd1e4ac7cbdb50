package promcollector_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const secret = "internal-secret-0123456789abcdef"

func traffic(t testing.TB, lim *addrlimit.Limiter) {
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(remote, auth string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	for range 7 {
		send("192.0.2.1:1", "") // 3 allowed, 4 limited
	}
	for range 4 {
		send("192.0.2.2:1", "Bearer "+secret) // exempt
	}
	for range 5 {
		send("192.0.2.3:1", "Bearer stale-token-0123456789") // 3 allowed, 2 limited with credentials
	}
	send("@", "") // key error, allowed
}

func newLimiter(t testing.TB) *addrlimit.Limiter {
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithExempt(tok.Match))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestCollectorCounts(t *testing.T) {
	lim := newLimiter(t)
	traffic(t, lim)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(lim, "public"))
	want := `
# HELP addrlimit_credentialed_limited_total Limited requests that carried an Authorization header: an internal caller whose token is missing or stale.
# TYPE addrlimit_credentialed_limited_total counter
addrlimit_credentialed_limited_total{limiter="public"} 2
# HELP addrlimit_key_errors_total Requests whose client key could not be determined cleanly (charged to a shared or fallback bucket).
# TYPE addrlimit_key_errors_total counter
addrlimit_key_errors_total{limiter="public"} 1
# HELP addrlimit_keys Buckets held in the in-memory table.
# TYPE addrlimit_keys gauge
addrlimit_keys{limiter="public"} 3
# HELP addrlimit_requests_total Requests decided by the rate limiter, by outcome.
# TYPE addrlimit_requests_total counter
addrlimit_requests_total{limiter="public",outcome="allowed"} 7
addrlimit_requests_total{limiter="public",outcome="exempt"} 4
addrlimit_requests_total{limiter="public",outcome="limited"} 6
# HELP addrlimit_store_errors_total Store failures, decided by the limiter's failure policy.
# TYPE addrlimit_store_errors_total counter
addrlimit_store_errors_total{limiter="public"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"addrlimit_requests_total", "addrlimit_credentialed_limited_total", "addrlimit_key_errors_total", "addrlimit_keys", "addrlimit_store_errors_total"); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorScrapeAndLint(t *testing.T) {
	public, login := newLimiter(t), newLimiter(t)
	traffic(t, public)
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollector.New(public, "public"), promcollector.New(login, "login"))

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`addrlimit_requests_total{limiter="public",outcome="limited"} 6`,
		`addrlimit_requests_total{limiter="login",outcome="limited"} 0`,
		`addrlimit_evictions_total{limiter="public"} 0`,
		`addrlimit_overflows_total{limiter="login"} 0`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("scrape lacks %q:\n%s", line, body)
		}
	}
	problems, err := testutil.CollectAndLint(promcollector.New(public, "public"))
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	if n := testutil.CollectAndCount(promcollector.New(public, "")); n != 9 {
		t.Fatalf("%d series, want 9 (fixed cardinality)", n)
	}
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
