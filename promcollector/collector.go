// Package promcollector exports an addrlimit.Limiter's counters to
// Prometheus.
//
// The collector reads Limiter.Stats at scrape time, so it adds nothing to the
// request path: no observer, no per-request allocation, no per-key label (the
// cardinality is fixed). Several limiters can share a registry when each
// collector has its own name, exported as the "limiter" label.
//
//	reg.MustRegister(promcollector.New(publicLimiter, "public"), promcollector.New(loginLimiter, "login"))
//
// Metrics:
//
//	addrlimit_requests_total{outcome="allowed|limited|exempt"}  counter
//	addrlimit_credentialed_limited_total                        counter  limited requests that carried an Authorization header
//	addrlimit_key_errors_total                                  counter  requests whose key could not be determined cleanly
//	addrlimit_store_errors_total                                counter  store failures (decided by the failure policy)
//	addrlimit_evictions_total                                   counter  buckets dropped before they refilled
//	addrlimit_overflows_total                                   counter  requests charged to the shared overflow bucket
//	addrlimit_keys                                              gauge    buckets held in memory
//
// Alert on addrlimit_credentialed_limited_total increasing: one of your own
// services is being throttled.
package promcollector

import (
	"github.com/addrlimit/addrlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector for one Limiter. It is safe for
// concurrent use.
type Collector struct {
	lim                                                                 *addrlimit.Limiter
	requests, credentialed, keyErrors, storeErrors, evictions, overflow *prometheus.Desc
	keys                                                                *prometheus.Desc
}

// New returns a collector for lim. A non-empty name is exported as the
// constant label limiter="<name>"; give every collector in one registry a
// distinct name.
func New(lim *addrlimit.Limiter, name string) *Collector {
	var labels prometheus.Labels
	if name != "" {
		labels = prometheus.Labels{"limiter": name}
	}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("addrlimit_"+metric, help, variable, labels)
	}
	return &Collector{
		lim:          lim,
		requests:     desc("requests_total", "Requests decided by the rate limiter, by outcome.", "outcome"),
		credentialed: desc("credentialed_limited_total", "Limited requests that carried an Authorization header: an internal caller whose token is missing or stale."),
		keyErrors:    desc("key_errors_total", "Requests whose client key could not be determined cleanly (charged to a shared or fallback bucket)."),
		storeErrors:  desc("store_errors_total", "Store failures, decided by the limiter's failure policy."),
		evictions:    desc("evictions_total", "Buckets dropped from the in-memory table before they had refilled, to make room."),
		overflow:     desc("overflows_total", "Requests charged to the shared overflow bucket because the table was full of empty buckets."),
		keys:         desc("keys", "Buckets held in the in-memory table."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.credentialed, c.keyErrors, c.storeErrors, c.evictions, c.overflow, c.keys} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.lim.Stats()
	counter := func(d *prometheus.Desc, v uint64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label...)
	}
	counter(c.requests, s.Allowed, "allowed")
	counter(c.requests, s.Limited, "limited")
	counter(c.requests, s.Exempt, "exempt")
	counter(c.credentialed, s.CredentialedLimited)
	counter(c.keyErrors, s.KeyErrors)
	counter(c.storeErrors, s.StoreErrors)
	counter(c.evictions, s.Evictions)
	counter(c.overflow, s.Overflows)
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys))
}
