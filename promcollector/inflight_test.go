package promcollector_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// InFlightSeries is what the collector exports for InFlightTraffic; the
// otelcollector module's test expects the same text.
const inFlightSeries = `
# HELP addrlimit_in_flight In-flight slots held in this process's memory, per policy with an in-flight limit.
# TYPE addrlimit_in_flight gauge
addrlimit_in_flight{policy="export"} 2
# HELP addrlimit_in_flight_limited_total Requests refused by the in-flight limit of their policy (counted as limited too).
# TYPE addrlimit_in_flight_limited_total counter
addrlimit_in_flight_limited_total{policy="export"} 1
# HELP addrlimit_in_flight_waiting Requests waiting for an in-flight slot (WithInFlightWait), per policy with an in-flight limit; they hold none.
# TYPE addrlimit_in_flight_waiting gauge
addrlimit_in_flight_waiting{policy="export"} 0
`

// TestCollectorInFlight: slots held and in-flight refusals, for the
// policies with an in-flight limit only (the default policy has none).
func TestCollectorInFlight(t *testing.T) {
	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{
		Name: "export", Limits: []addrlimit.Limit{{Burst: 300, Interval: time.Minute / 300}}, InFlight: 2,
	}))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := httptest.NewRequest("GET", "/export", nil)
		lim.AllowKey(r.Context(), "export", "client", 1) // two hold their slots, the third is refused
	}
	c := promcollector.New(lim, "")
	if err := testutil.CollectAndCompare(c, strings.NewReader(inFlightSeries), "addrlimit_in_flight", "addrlimit_in_flight_limited_total", "addrlimit_in_flight_waiting"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorInFlightAlone: a policy with an in-flight limit and no rate
// limit has the in-flight series and its requests, and no limit series.
func TestCollectorInFlightAlone(t *testing.T) {
	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{Name: "export", InFlight: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := httptest.NewRequest("GET", "/export", nil)
		lim.AllowKey(r.Context(), "export", "client", 1) // two hold their slots, the third is refused
	}
	c := promcollector.New(lim, "")
	if err := testutil.CollectAndCompare(c, strings.NewReader(inFlightSeries), "addrlimit_in_flight", "addrlimit_in_flight_limited_total", "addrlimit_in_flight_waiting"); err != nil {
		t.Fatal(err)
	}
	const requests = `
# HELP addrlimit_requests_total Requests decided by the rate limiter: allowed or limited (dry-run included) per policy, exempt with policy="".
# TYPE addrlimit_requests_total counter
addrlimit_requests_total{outcome="allowed",policy="default"} 0
addrlimit_requests_total{outcome="allowed",policy="export"} 2
addrlimit_requests_total{outcome="exempt",policy=""} 0
addrlimit_requests_total{outcome="limited",policy="default"} 0
addrlimit_requests_total{outcome="limited",policy="export"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(requests), "addrlimit_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "addrlimit_limit_denials_total"); n != 1 {
		t.Fatalf("%d limit_denials_total series, want 1 (the default policy's one limit)", n)
	}
}
