package promcollector_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// identitySeries is what identityTraffic leaves in the identity series;
// otelcollector's tests read it too.
const identitySeries = "testdata/identities.prom"

// identityTraffic returns a limiter of 1 request per hour whose token has
// the identities edge (one secret, one retired) and preview-gate, after:
// edge exempt 3 times, preview-gate once, edge's retired secret twice (1
// allowed, 1 limited), a forged token once (limited).
func identityTraffic(t *testing.T) *addrlimit.Limiter {
	t.Helper()
	tok, err := addrlimit.NewIdentities(
		addrlimit.Identity{Name: "edge", Secrets: []string{secret}, Retired: []string{retired}},
		addrlimit.Identity{Name: "preview-gate", Secrets: []string{"gate-secret-0123456789abcdef"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := addrlimit.New(1, time.Hour, addrlimit.WithInternalToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, auth := range []string{secret, secret, secret, "gate-secret-0123456789abcdef", retired, retired, "forged-token-0123456789abcdef"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("Authorization", "Bearer "+auth)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if s := lim.Stats(); s.StoreErrors != 0 {
		t.Fatalf("StoreErrors = %d", s.StoreErrors)
	}
	return lim
}

func TestCollectorIdentities(t *testing.T) {
	lim := identityTraffic(t)
	reg := prometheus.NewPedanticRegistry()
	c := promcollector.New(lim, "public")
	reg.MustRegister(c)
	want, err := os.Open(identitySeries)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if err := testutil.GatherAndCompare(reg, want, "addrlimit_identity_exempt_total", "addrlimit_identity_retired_token_limited_total", "addrlimit_retired_token_limited_total"); err != nil {
		t.Fatal(err)
	}
	// 3 series for the one policy, 1 for its one limit, 2 per identity, 9 others.
	if got, want := testutil.CollectAndCount(c), 3+1+2*2+9; got != want {
		t.Fatalf("%d series, want %d", got, want)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}
