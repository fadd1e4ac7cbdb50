package otelcollector_test

import (
	"strings"
	"testing"

	"github.com/addrlimit/addrlimit/otelcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
)

// wantPromcollector is what promcollector exports for limiterWithTraffic
// (its TestCollectorCounts). Routed through OpenTelemetry's Prometheus
// exporter, this package must give the very same text, so that dashboards and
// alerts do not depend on which module feeds them.
const wantPromcollector = `
# HELP addrlimit_approx_fill_ratio Fraction (0 to 1) of the approximate memory's cells still holding a future time, in the fullest policy's table; 0 until a table first fills.
# TYPE addrlimit_approx_fill_ratio gauge
addrlimit_approx_fill_ratio{limiter="public"} 0
# HELP addrlimit_approx_keys Estimated number of keys whose state lives only in the approximate memory.
# TYPE addrlimit_approx_keys gauge
addrlimit_approx_keys{limiter="public"} 0
# HELP addrlimit_credentialed_limited_total Limited requests that carried an Authorization header. A weak hint: any client can send one.
# TYPE addrlimit_credentialed_limited_total counter
addrlimit_credentialed_limited_total{limiter="public"} 4
# HELP addrlimit_evictions_total Buckets moved out of the exact in-memory table into the approximate memory, to make room.
# TYPE addrlimit_evictions_total counter
addrlimit_evictions_total{limiter="public"} 0
# HELP addrlimit_key_errors_total Requests whose key, policy or cost could not be determined cleanly; each was still charged.
# TYPE addrlimit_key_errors_total counter
addrlimit_key_errors_total{limiter="public"} 1
# HELP addrlimit_keys Exact buckets held in memory.
# TYPE addrlimit_keys gauge
addrlimit_keys{limiter="public",policy="default"} 4
addrlimit_keys{limiter="public",policy="login"} 1
# HELP addrlimit_refunded_total Allowed requests whose tokens were given back because of their response status (WithRefund).
# TYPE addrlimit_refunded_total counter
addrlimit_refunded_total{limiter="public"} 4
# HELP addrlimit_requests_total Requests decided by the rate limiter: allowed or limited (dry-run included) per policy, exempt with policy="".
# TYPE addrlimit_requests_total counter
addrlimit_requests_total{limiter="public",outcome="allowed",policy="default"} 14
addrlimit_requests_total{limiter="public",outcome="allowed",policy="login"} 2
addrlimit_requests_total{limiter="public",outcome="exempt",policy=""} 4
addrlimit_requests_total{limiter="public",outcome="limited",policy="default"} 8
addrlimit_requests_total{limiter="public",outcome="limited",policy="login"} 1
# HELP addrlimit_retired_token_limited_total Limited requests that carried a retired internal token secret: a caller that missed a rotation, or a leaked old secret.
# TYPE addrlimit_retired_token_limited_total counter
addrlimit_retired_token_limited_total{limiter="public"} 2
# HELP addrlimit_store_errors_total Store failures, decided by the limiter's failure policy.
# TYPE addrlimit_store_errors_total counter
addrlimit_store_errors_total{limiter="public"} 0
`

func TestPrometheusExporterGivesPromcollectorSeries(t *testing.T) {
	lim := limiterWithTraffic(t)
	reg := prometheus.NewPedanticRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	c, err := otelcollector.New(lim, newProvider(t, exporter).Meter("test"), otelcollector.WithName("public"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Unregister()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantPromcollector)); err != nil {
		t.Fatal(err)
	}
}
