package otelcollector_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/otelcollector"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func Example() {
	lim, _ := addrlimit.New(2, time.Minute)

	// In production: a periodic reader with an OTLP exporter, or the
	// Prometheus exporter, and otel.GetMeterProvider().
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, err := otelcollector.New(lim, provider.Meter("github.com/addrlimit/addrlimit"), otelcollector.WithName("api"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Unregister()

	api := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "addrlimit.requests" {
				continue
			}
			var lines []string
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				lines = append(lines, fmt.Sprintf("%s %s %s %d", m.Name, m.Unit, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
			}
			slices.Sort(lines)
			for _, l := range lines {
				fmt.Println(l)
			}
		}
	}
	// Output:
	// addrlimit.requests {request} limiter=api,outcome=allowed,policy=default 2
	// addrlimit.requests {request} limiter=api,outcome=exempt,policy= 0
	// addrlimit.requests {request} limiter=api,outcome=limited,policy=default 1
}
