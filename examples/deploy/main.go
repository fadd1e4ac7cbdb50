// Command deploy is the setup the incident's team deploys: the public API
// limited to 300 requests a minute per client address, across every
// instance, with the company's own services exempt by name.
//
//   - Behind a load balancer: clients are keyed by X-Forwarded-For, read only
//     from the load balancer's ranges (TrustedProxies), never as sent.
//   - Named internal identities (NewIdentities): the edge, the orchestrator
//     and the preview gate each send their own secret as
//     "Authorization: Bearer …"; they are exempt from the limit, and the
//     same check guards /internal/ (401 without it). A wrong, forged or
//     retired secret is charged like no secret.
//   - The LogObserver logs whom the limiter refuses (JSON on stderr), one
//     line per key per minute, never a token.
//   - Prometheus /metrics (promcollector) on its own listener, which only
//     the monitoring network should reach.
//   - The Redis store (redisstore), so that every instance shares one budget
//     per client.
//
// Run two instances against one Redis (each with its own ADDR and
// METRICS_ADDR) and a client gets 300 a minute in all, not 300 from each.
// Configuration, from the environment:
//
//	ADDR             the API's address (default 127.0.0.1:8080)
//	METRICS_ADDR     the /metrics address (default 127.0.0.1:9090)
//	REDIS_ADDR       Redis (default 127.0.0.1:6379)
//	REDIS_TIMEOUT    the store's timeout per round trip (default 50ms)
//	TRUSTED_PROXIES  the load balancers' ranges, comma-separated (required)
//	EDGE_SECRET, ORCHESTRATOR_SECRET, PREVIEW_GATE_SECRET  each service's secret (required)
//	ORCHESTRATOR_SECRET_RETIRED  an orchestrator secret being retired (optional)
//
// Its test (main_test.go) starts a real redis-server and two instances on
// loopback and checks what this comment promises.
package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(os.Getenv, logger); err != nil {
		logger.Error("deploy: " + err.Error())
		os.Exit(1)
	}
}

// run builds the service from the configuration getenv reads and serves it
// until a listener fails.
func run(getenv func(string) string, logger *slog.Logger) error {
	proxies, err := trustedProxies(getenv("TRUSTED_PROXIES"))
	if err != nil {
		return err
	}
	tok, err := identities(getenv)
	if err != nil {
		return err
	}
	timeout, err := time.ParseDuration(cmp.Or(getenv("REDIS_TIMEOUT"), "50ms"))
	if err != nil {
		return fmt.Errorf("REDIS_TIMEOUT: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(getenv("REDIS_ADDR"), "127.0.0.1:6379"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithTimeout(timeout))
	if err != nil {
		return err
	}
	lo, err := addrlimit.NewLogObserver(logger, time.Minute)
	if err != nil {
		return err
	}
	lim, err := addrlimit.New(300, time.Minute,
		addrlimit.WithKeyFunc(proxies.Key),
		addrlimit.WithInternalToken(tok),
		addrlimit.WithStore(store), // the failure policy is FailLocal: see docs/redis.md
		addrlimit.WithObserver(lo.Observe))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(promcollector.New(lim, "public")); err != nil {
		return err
	}
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	errs := make(chan error, 2)
	serve := func(addr string, h http.Handler) {
		srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
		errs <- srv.ListenAndServe()
	}
	go serve(cmp.Or(getenv("METRICS_ADDR"), "127.0.0.1:9090"), metrics)
	go serve(cmp.Or(getenv("ADDR"), "127.0.0.1:8080"), lim.Handler(api(tok)))
	return <-errs
}

// api is the service: public routes, and internal ones that need a
// service's secret.
func api(tok *addrlimit.InternalToken) http.Handler {
	internal := http.NewServeMux()
	internal.HandleFunc("GET /internal/domains/lookup", func(w http.ResponseWriter, _ *http.Request) { write(w, "found") })
	internal.HandleFunc("PUT /internal/agents/{id}/progress", func(w http.ResponseWriter, _ *http.Request) { write(w, "saved") })
	internal.HandleFunc("GET /internal/previews/{id}/access", func(w http.ResponseWriter, _ *http.Request) { write(w, "granted") })
	mux := http.NewServeMux()
	mux.Handle("/internal/", tok.Require(internal)) // 401 without a service's secret, on every /internal/ path
	mux.HandleFunc("GET /v1/sites", func(w http.ResponseWriter, _ *http.Request) { write(w, "[]") })
	return mux
}

func write(w http.ResponseWriter, body string) {
	_, _ = io.WriteString(w, body) // a client that left: nothing to do
}

// trustedProxies keys clients by X-Forwarded-For from the load balancers'
// ranges, a comma-separated list of prefixes.
func trustedProxies(ranges string) (*addrlimit.TrustedProxies, error) {
	if strings.TrimSpace(ranges) == "" {
		return nil, errors.New("TRUSTED_PROXIES is empty: give the ranges your load balancers connect from (e.g. 10.0.12.0/28), the narrowest you can")
	}
	var prefixes []netip.Prefix
	for _, r := range strings.Split(ranges, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("TRUSTED_PROXIES: %w", err)
		}
		prefixes = append(prefixes, p)
	}
	return addrlimit.NewTrustedProxies("X-Forwarded-For", prefixes...)
}

// identities names the three services that call the API from the shared
// egress addresses.
func identities(getenv func(string) string) (*addrlimit.InternalToken, error) {
	orchestrator := addrlimit.Identity{Name: "orchestrator", Secrets: []string{getenv("ORCHESTRATOR_SECRET")}}
	if old := getenv("ORCHESTRATOR_SECRET_RETIRED"); old != "" {
		orchestrator.Retired = []string{old}
	}
	return addrlimit.NewIdentities(
		addrlimit.Identity{Name: "edge", Secrets: []string{getenv("EDGE_SECRET")}},
		orchestrator,
		addrlimit.Identity{Name: "preview-gate", Secrets: []string{getenv("PREVIEW_GATE_SECRET")}},
	)
}
