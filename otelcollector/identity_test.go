package otelcollector_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/otelcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// identityTraffic returns a limiter of 1 request per hour whose token has
// the identities edge (one secret, one retired) and preview-gate, after the
// traffic of promcollector's identityTraffic: edge exempt 3 times,
// preview-gate once, edge's retired secret twice (1 allowed, 1 limited), a
// forged token once (limited).
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
	reader := sdkmetric.NewManualReader()
	c, err := otelcollector.New(identityTraffic(t), newProvider(t, reader).Meter("test"), otelcollector.WithName("public"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Unregister()
	points, _ := collect(t, reader)
	got := map[string]string{}
	for _, k := range []string{
		"addrlimit.identity_exempt{identity=edge,limiter=public}",
		"addrlimit.identity_exempt{identity=preview-gate,limiter=public}",
		"addrlimit.identity_retired_token_limited{identity=edge,limiter=public}",
		"addrlimit.identity_retired_token_limited{identity=preview-gate,limiter=public}",
		"addrlimit.retired_token_limited{limiter=public}",
	} {
		got[k] = points[k]
	}
	diff(t, "point", got, map[string]string{
		"addrlimit.identity_exempt{identity=edge,limiter=public}":                        "3",
		"addrlimit.identity_exempt{identity=preview-gate,limiter=public}":                "1",
		"addrlimit.identity_retired_token_limited{identity=edge,limiter=public}":         "1",
		"addrlimit.identity_retired_token_limited{identity=preview-gate,limiter=public}": "0",
		"addrlimit.retired_token_limited{limiter=public}":                                "1",
	})
}

// Through OpenTelemetry's Prometheus exporter the identity series are
// promcollector's, to the byte.
func TestPrometheusExporterGivesPromcollectorIdentitySeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	c, err := otelcollector.New(identityTraffic(t), newProvider(t, exporter).Meter("test"), otelcollector.WithName("public"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Unregister()
	want, err := os.Open("../promcollector/testdata/identities.prom")
	if err != nil {
		t.Fatalf("%v: run the tests from a clone of the repository", err)
	}
	defer want.Close()
	if err := testutil.GatherAndCompare(reg, want, "addrlimit_identity_exempt_total", "addrlimit_identity_retired_token_limited_total", "addrlimit_retired_token_limited_total"); err != nil {
		t.Fatal(err)
	}
}
