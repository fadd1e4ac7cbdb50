// Package promcollector exports an addrlimit.Limiter's counters to
// Prometheus.
//
// The collector reads Limiter.Stats once per scrape, so it adds nothing to the
// request path: no observer, no per-request allocation, no per-key label. The
// cardinality is fixed by the limiter's configuration: 3 series per policy,
// 1 per limit of a policy (at most 4, store.MaxLimits), 3 per policy with
// an in-flight limit (addrlimit.Policy.InFlight), 2 per named
// internal identity (addrlimit.NewIdentities, at most 64), plus 9. Several
// limiters can share a registry when each collector has its
// own name, exported as the constant label "limiter".
//
//	reg.MustRegister(promcollector.New(publicLimiter, "public"), promcollector.New(loginLimiter, "login"))
//
// Metrics (the package otelcollector reports the same figures through
// OpenTelemetry as addrlimit.requests, addrlimit.keys, ...; OpenTelemetry's
// Prometheus exporter turns those into exactly these series):
//
//	addrlimit_requests_total{policy,outcome}  counter  decisions; outcome is "allowed" or "limited" (dry-run
//	                                                   included) per policy, and "exempt" with policy=""
//	addrlimit_limit_denials_total{policy,limit} counter limited requests by the limit that denied them
//	                                                   (Decision.Limit; FailClosed and costs over the burst in none)
//	addrlimit_refunded_total                  counter  allowed requests given their tokens back by WithRefund
//	addrlimit_credentialed_limited_total      counter  limited requests that carried an Authorization header
//	                                                   (weak hint: anyone can send one)
//	addrlimit_retired_token_limited_total     counter  limited requests that carried a retired internal secret
//	                                                   (nobody else can send it: alert on this)
//	addrlimit_key_errors_total                counter  requests whose key, policy or cost was not clean (still charged)
//	addrlimit_store_errors_total              counter  store failures (decided by the failure policy)
//	addrlimit_evictions_total                 counter  buckets moved from the exact table to the approximate memory
//	addrlimit_keys{policy}                    gauge    exact buckets held in this process's memory (with a
//	                                                   remote store: its local FailLocal mirror, not the store's)
//	addrlimit_approx_keys                     gauge    estimated keys held only in the approximate memory
//	addrlimit_approx_fill_ratio               gauge    fraction (0 to 1) of the approximate memory's cells in use,
//	                                                   in the fullest policy's table
//	addrlimit_in_flight{policy}               gauge    in-flight slots held in this process's memory, for each
//	                                                   policy with an in-flight limit (Policy.InFlight)
//	addrlimit_in_flight_waiting{policy}       gauge    requests waiting for a slot (WithInFlightWait), for each
//	                                                   policy with an in-flight limit
//	addrlimit_in_flight_limited_total{policy} counter  requests the in-flight limit refused (in requests_total's
//	                                                   "limited" too), for each policy with an in-flight limit
//	addrlimit_identity_exempt_total{identity} counter  requests exempted by a secret of the named identity
//	addrlimit_identity_retired_token_limited_total{identity}
//	                                          counter  limited requests that carried a retired secret of the
//	                                                   named identity: that service missed a rotation
//
// The identity series exist only for the names of addrlimit.NewIdentities,
// so a client cannot add one; requests with anonymous secrets
// (NewInternalToken, WithRetired) count only in the totals above.
//
// Exempt requests bypass the limiter before any policy is chosen, so their
// series carries policy="" (in PromQL, the same as no policy label); no policy
// can have that name, so it never mixes with a real one. Summing
// addrlimit_requests_total over every label counts every request the limiter
// saw.
//
// Alerting rules on these series (tested with promtool) and a Grafana
// dashboard are in the module's alerts directory; docs/observability.md
// ("Metrics: Prometheus and OpenTelemetry side by side") explains them.
package promcollector

import (
	"github.com/addrlimit/addrlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector for one Limiter. It is safe for
// concurrent use; a scrape reads Limiter.Stats once.
type Collector struct {
	lim                                        *addrlimit.Limiter
	requests, refunded, credentialed, retired  *prometheus.Desc
	denials                                    *prometheus.Desc
	keyErrors, storeErrors, evictions          *prometheus.Desc
	keys, approxKeys, approxFill               *prometheus.Desc
	identityExempt, identityRetired            *prometheus.Desc
	inFlight, inFlightWaiting, inFlightLimited *prometheus.Desc
}

// New returns a collector for lim, which must not be nil. A non-empty name is
// exported as the constant label limiter="<name>"; give every collector in
// one registry a distinct name. It labels the collector's series only: the
// limiter's policy names (addrlimit.WithName, WithPolicy) are the separate
// "policy" label.
func New(lim *addrlimit.Limiter, name string) *Collector {
	if lim == nil {
		panic("promcollector: New called with a nil Limiter")
	}
	var labels prometheus.Labels
	if name != "" {
		labels = prometheus.Labels{"limiter": name}
	}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("addrlimit_"+metric, help, variable, labels)
	}
	return &Collector{
		lim:             lim,
		requests:        desc("requests_total", `Requests decided by the rate limiter: allowed or limited (dry-run included) per policy, exempt with policy="".`, "policy", "outcome"),
		denials:         desc("limit_denials_total", "Limited requests (dry-run included) by the limit of their policy that denied them.", "policy", "limit"),
		refunded:        desc("refunded_total", "Allowed requests whose tokens were given back because of their response status (WithRefund)."),
		credentialed:    desc("credentialed_limited_total", "Limited requests that carried an Authorization header. A weak hint: any client can send one."),
		retired:         desc("retired_token_limited_total", "Limited requests that carried a retired internal token secret: a caller that missed a rotation, or a leaked old secret."),
		keyErrors:       desc("key_errors_total", "Requests whose key, policy or cost could not be determined cleanly; each was still charged."),
		storeErrors:     desc("store_errors_total", "Store failures, decided by the limiter's failure policy."),
		evictions:       desc("evictions_total", "Buckets moved out of the exact in-memory table into the approximate memory, to make room."),
		keys:            desc("keys", "Exact buckets held in this process's memory (with a remote store: the local mirror kept under FailLocal, not the store's own buckets).", "policy"),
		approxKeys:      desc("approx_keys", "Estimated number of keys whose state lives only in the approximate memory."),
		identityExempt:  desc("identity_exempt_total", "Requests exempted by a secret of the named internal identity.", "identity"),
		identityRetired: desc("identity_retired_token_limited_total", "Limited requests that carried a retired secret of the named internal identity: that service missed a rotation.", "identity"),
		inFlight:        desc("in_flight", "In-flight slots held in this process's memory, per policy with an in-flight limit.", "policy"),
		inFlightWaiting: desc("in_flight_waiting", "Requests waiting for an in-flight slot (WithInFlightWait), per policy with an in-flight limit; they hold none.", "policy"),
		inFlightLimited: desc("in_flight_limited_total", "Requests refused by the in-flight limit of their policy (counted as limited too).", "policy"),
		approxFill:      desc("approx_fill_ratio", "Fraction (0 to 1) of the approximate memory's cells still holding a future time, in the fullest policy's table; 0 until a table first fills."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.requests, c.denials, c.refunded, c.credentialed, c.retired, c.keyErrors, c.storeErrors, c.evictions,
		c.keys, c.approxKeys, c.approxFill, c.identityExempt, c.identityRetired, c.inFlight, c.inFlightWaiting, c.inFlightLimited,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.lim.Stats()
	policies := c.lim.Policies()
	counter := func(d *prometheus.Desc, v uint64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label...)
	}
	gauge := func(d *prometheus.Desc, v float64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label...)
	}
	for i, p := range s.Policies {
		counter(c.requests, p.Allowed, p.Name, "allowed")
		counter(c.requests, p.Limited, p.Name, "limited")
		for _, l := range p.Limits {
			counter(c.denials, l.Limited, p.Name, l.Name)
		}
		gauge(c.keys, float64(p.Keys), p.Name)
		if policies[i].InFlight > 0 {
			gauge(c.inFlight, float64(p.InFlight), p.Name)
			gauge(c.inFlightWaiting, float64(p.InFlightWaiting), p.Name)
			counter(c.inFlightLimited, p.InFlightLimited, p.Name)
		}
	}
	counter(c.requests, s.Exempt, "", "exempt")
	counter(c.refunded, s.Refunded)
	counter(c.credentialed, s.CredentialedLimited)
	counter(c.retired, s.RetiredTokenLimited)
	counter(c.keyErrors, s.KeyErrors)
	counter(c.storeErrors, s.StoreErrors)
	counter(c.evictions, s.Evictions)
	gauge(c.approxKeys, float64(s.ApproxKeys))
	gauge(c.approxFill, s.ApproxFill)
	for _, id := range s.Identities {
		counter(c.identityExempt, id.Exempt, id.Name)
		counter(c.identityRetired, id.RetiredTokenLimited, id.Name)
	}
}
