package promcollector_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func Example() {
	lim, _ := addrlimit.New(2, time.Minute)
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollector.New(lim, "api"))

	api := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	w := httptest.NewRecorder() // in production: mux.Handle("/metrics", promhttp.HandlerFor(reg, ...))
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "addrlimit_requests_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// addrlimit_requests_total{limiter="api",outcome="allowed",policy="default"} 2
	// addrlimit_requests_total{limiter="api",outcome="exempt",policy=""} 0
	// addrlimit_requests_total{limiter="api",outcome="limited",policy="default"} 1
}
