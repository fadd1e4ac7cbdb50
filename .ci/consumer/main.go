// Command consumer is the program .ci/consumer-check builds in a throwaway
// module against the published modules, fetched from a file-based module proxy
// exactly as a user's go get fetches them. It wires the modules together as
// the README does and makes a few decisions in memory; it needs no Redis.
// The check also compiles a blank import of every public package of every
// published module, so a new module is covered without editing this file.
// Keep it small, and keep it compiling against the API on main.
package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/otelcollector"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/addrlimit/addrlimit/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The published versions of the core and the Redis store agree on the
// Store contract.
var _ store.Store = (*redisstore.Store)(nil)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	if _, err := redisstore.New(client); err != nil { // without a Redis there New cannot read its memory policy, and builds the store
		return err
	}

	lim, err := addrlimit.New(2, time.Minute)
	if err != nil {
		return err
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != want {
			return fmt.Errorf("request %d: status %d, want %d", i+1, rec.Code, want)
		}
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(promcollector.New(lim, "consumer")); err != nil {
		return err
	}
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	if len(families) == 0 {
		return fmt.Errorf("the collector exported no metric")
	}

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	oc, err := otelcollector.New(lim, provider.Meter("consumer"))
	if err != nil {
		return err
	}
	defer oc.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	if len(rm.ScopeMetrics) == 0 || len(rm.ScopeMetrics[0].Metrics) == 0 {
		return fmt.Errorf("the OpenTelemetry collector reported no metric")
	}
	fmt.Printf("consumer: 2 allowed, 1 limited; %d Prometheus metric families, %d OpenTelemetry metrics\n", len(families), len(rm.ScopeMetrics[0].Metrics))
	return nil
}
