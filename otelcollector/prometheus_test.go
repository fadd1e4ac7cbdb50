package otelcollector_test

import (
	"os"
	"testing"

	"github.com/addrlimit/addrlimit/otelcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
)

// promcollectorSeries is what promcollector exports for the traffic of
// limiterWithTraffic (its TestCollectorCounts reads the same file). Routed
// through OpenTelemetry's Prometheus exporter, this package must give the very
// same text, so that dashboards and alerts do not depend on which module feeds
// them. The file belongs to the sibling module's directory: these tests run
// from a clone of the repository, not from the module cache.
const promcollectorSeries = "../promcollector/testdata/series.prom"

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
	want, err := os.Open(promcollectorSeries)
	if err != nil {
		t.Fatalf("%v: run the tests from a clone of the repository", err)
	}
	defer want.Close()
	if err := testutil.GatherAndCompare(reg, want); err != nil {
		t.Fatal(err)
	}
}
