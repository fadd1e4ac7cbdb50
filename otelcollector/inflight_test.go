package otelcollector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/otelcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
)

// TestInFlightThroughPrometheusExporter: the in-flight instruments give,
// through OpenTelemetry's Prometheus exporter, the series promcollector's
// TestCollectorInFlight expects for the same traffic, beside a rate limit
// or alone (no limit series then: only the default policy's one).
func TestInFlightThroughPrometheusExporter(t *testing.T) {
	for _, limits := range [][]addrlimit.Limit{{{Burst: 300, Interval: time.Minute / 300}}, nil} {
		t.Run(fmt.Sprintf("%d-limits", len(limits)), func(t *testing.T) {
			lim, err := addrlimit.New(300, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{Name: "export", Limits: limits, InFlight: 2}))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				lim.AllowKey(context.Background(), "export", "client", 1)
			}
			reg := prometheus.NewPedanticRegistry()
			exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
			if err != nil {
				t.Fatal(err)
			}
			c, err := otelcollector.New(lim, newProvider(t, exporter).Meter("test"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Unregister()
			want := `
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
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "addrlimit_in_flight", "addrlimit_in_flight_limited_total", "addrlimit_in_flight_waiting"); err != nil {
				t.Fatal(err)
			}
			n, err := testutil.GatherAndCount(reg, "addrlimit_limit_denials_total")
			if err != nil || n != 1+len(limits) {
				t.Fatalf("%d limit_denials_total series (%v), want %d", n, err, 1+len(limits))
			}
		})
	}
}
