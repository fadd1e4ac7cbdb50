package otelcollector_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/otelcollector"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

const (
	secret  = "internal-secret-0123456789abcdef"
	retired = "retired-secret-0123456789abcdef"
)

// limiterWithTraffic returns a limiter (default policy 3 per hour, "login"
// 2 per hour: no token refills during a test; internal token with a retired
// secret; refund for 204 responses) after the requests listed below.
func limiterWithTraffic(t *testing.T) *addrlimit.Limiter {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = tok.WithRetired(retired); err != nil {
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
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/free" {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	for _, c := range []struct {
		n                  int
		remote, path, auth string
	}{
		{7, "192.0.2.1:1", "/", ""},                             // 3 allowed, 4 limited
		{4, "192.0.2.2:1", "/", "Bearer " + secret},             // 4 exempt
		{5, "192.0.2.3:1", "/", "Bearer junk-token-0123456789"}, // 3 allowed, 2 limited credentialed
		{5, "192.0.2.4:1", "/", "Bearer " + retired},            // 3 allowed, 2 limited credentialed, retired secret
		{4, "192.0.2.5:1", "/free", ""},                         // 4 allowed and refunded: full again, so no bucket kept
		{1, "@", "/", ""},                                       // key error: 1 allowed in the unkeyed bucket
	} {
		for range c.n {
			r := httptest.NewRequest("GET", c.path, nil)
			r.RemoteAddr = c.remote
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	for range 3 {
		lim.AllowKey(context.Background(), "login", "user@example.com", 1) // 2 allowed, 1 limited
	}
	if s := lim.Stats(); s.StoreErrors != 0 {
		t.Fatalf("StoreErrors = %d: decisions were degraded, counts would be meaningless", s.StoreErrors)
	}
	return lim
}

// collect returns every data point the reader collects, as
// "name{attributes}" -> value, and every instrument as name -> "unit kind".
func collect(t *testing.T, r sdkmetric.Reader) (points, shapes map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points, shapes = map[string]string{}, map[string]string{}
	add := func(name string, attrs attribute.Set, v any) {
		k := name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
		if _, dup := points[k]; dup {
			t.Errorf("two data points %s", k)
		}
		points[k] = fmt.Sprint(v)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				shapes[m.Name] = fmt.Sprintf("%s sum monotonic=%t %s", m.Unit, d.IsMonotonic, d.Temporality)
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, p.Value)
				}
			case metricdata.Gauge[float64]:
				shapes[m.Name] = m.Unit + " gauge"
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, p.Value)
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return points, shapes
}

// newProvider returns a meter provider that reports to reader and is shut
// down when the test ends.
func newProvider(t *testing.T, reader sdkmetric.Reader) *sdkmetric.MeterProvider {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return provider
}

func diff(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s %s = %q, want %q", what, k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s %s = %q", what, k, got[k])
		}
	}
}

func TestCollectorExactValues(t *testing.T) {
	lim := limiterWithTraffic(t)
	reader := sdkmetric.NewManualReader()
	provider := newProvider(t, reader)
	c, err := otelcollector.New(lim, provider.Meter("test"), otelcollector.WithName("public"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Unregister()

	points, shapes := collect(t, reader)
	diff(t, "point", points, map[string]string{
		"addrlimit.requests{limiter=public,outcome=allowed,policy=default}": "14",
		"addrlimit.requests{limiter=public,outcome=limited,policy=default}": "8",
		"addrlimit.requests{limiter=public,outcome=allowed,policy=login}":   "2",
		"addrlimit.requests{limiter=public,outcome=limited,policy=login}":   "1",
		"addrlimit.requests{limiter=public,outcome=exempt,policy=}":         "4",
		"addrlimit.limit_denials{limit=1h,limiter=public,policy=default}":   "8",
		"addrlimit.limit_denials{limit=1h,limiter=public,policy=login}":     "1",
		"addrlimit.refunded{limiter=public}":                                "4",
		"addrlimit.credentialed_limited{limiter=public}":                    "4",
		"addrlimit.retired_token_limited{limiter=public}":                   "2",
		"addrlimit.key_errors{limiter=public}":                              "1",
		"addrlimit.store_errors{limiter=public}":                            "0",
		"addrlimit.evictions{limiter=public}":                               "0",
		"addrlimit.keys{limiter=public,policy=default}":                     "4",
		"addrlimit.keys{limiter=public,policy=login}":                       "1",
		"addrlimit.approx_keys{limiter=public}":                             "0",
		"addrlimit.approx_fill{limiter=public}":                             "0",
	})
	counter := func(unit string) string { return unit + " sum monotonic=true CumulativeTemporality" }
	diff(t, "instrument", shapes, map[string]string{
		"addrlimit.requests":              counter("{request}"),
		"addrlimit.limit_denials":         counter("{request}"),
		"addrlimit.refunded":              counter("{request}"),
		"addrlimit.credentialed_limited":  counter("{request}"),
		"addrlimit.retired_token_limited": counter("{request}"),
		"addrlimit.key_errors":            counter("{request}"),
		"addrlimit.store_errors":          counter("{error}"),
		"addrlimit.evictions":             counter("{key}"),
		"addrlimit.keys":                  "{key} sum monotonic=false CumulativeTemporality",
		"addrlimit.approx_keys":           "{key} sum monotonic=false CumulativeTemporality",
		"addrlimit.approx_fill":           "1 gauge",
	})
}

// Each collection reads the current Stats: a second collection after more
// traffic reports the new totals, not the ones cached at New.
func TestCollectorReadsAtCollection(t *testing.T) {
	lim, err := addrlimit.New(1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	provider := newProvider(t, reader)
	if _, err := otelcollector.New(lim, provider.Meter("test")); err != nil {
		t.Fatal(err)
	}
	const limited = "addrlimit.requests{outcome=limited,policy=default}"
	points, _ := collect(t, reader)
	if got := points[limited]; got != "0" {
		t.Fatalf("before traffic: %s = %q, want 0", limited, got)
	}
	if got, want := len(points), 3*1+1+9; got != want {
		t.Fatalf("%d data points, want %d (3 per policy, 1 per limit, plus 9)", got, want)
	}
	r := httptest.NewRequest("GET", "/", nil)
	for range 3 {
		lim.Allow(r)
	}
	points, _ = collect(t, reader)
	if got := points[limited]; got != "2" {
		t.Fatalf("after traffic: %s = %q, want 2", limited, got)
	}
}

func TestCollectorsShareAMeter(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := newProvider(t, reader)
	meter := provider.Meter("test")
	public := limiterWithTraffic(t)
	login, err := addrlimit.New(1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := otelcollector.New(public, meter, otelcollector.WithName("public"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := otelcollector.New(login, meter, otelcollector.WithName("login"))
	if err != nil {
		t.Fatal(err)
	}
	points, _ := collect(t, reader)
	for k, want := range map[string]string{
		"addrlimit.requests{limiter=public,outcome=limited,policy=default}": "8",
		"addrlimit.requests{limiter=login,outcome=limited,policy=default}":  "0",
	} {
		if got := points[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	// Unregister stops one collector's reports, is idempotent, and leaves the
	// other collector reporting.
	for range 2 {
		if err := cp.Unregister(); err != nil {
			t.Fatal(err)
		}
	}
	points, _ = collect(t, reader)
	for k := range points {
		if strings.Contains(k, "limiter=public") {
			t.Errorf("after Unregister: %s still reported", k)
		}
	}
	if got := points["addrlimit.requests{limiter=login,outcome=limited,policy=default}"]; got != "0" {
		t.Errorf("the other collector stopped reporting: %q", got)
	}
	if err := cl.Unregister(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsNil(t *testing.T) {
	lim, err := addrlimit.New(1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otelcollector.New(nil, noop.NewMeterProvider().Meter("test")); err == nil {
		t.Error("New(nil Limiter) gave no error")
	}
	if _, err := otelcollector.New(lim, nil); err == nil {
		t.Error("New(nil Meter) gave no error")
	}
	c, err := otelcollector.New(lim, noop.NewMeterProvider().Meter("test"))
	if err != nil {
		t.Fatalf("noop meter: %v", err)
	}
	if err := c.Unregister(); err != nil {
		t.Fatal(err)
	}
}
