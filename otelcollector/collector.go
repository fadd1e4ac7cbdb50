// Package otelcollector exports an addrlimit.Limiter's counters through the
// OpenTelemetry metrics API.
//
// New registers observable instruments and one callback on a Meter. The
// callback reads Limiter.Stats once per collection, so the collector adds
// nothing to the request path: no observer, no per-request work, no per-key
// attribute (the cardinality is fixed by the limiter's configuration).
//
//	c, err := otelcollector.New(lim, provider.Meter("github.com/addrlimit/addrlimit"), otelcollector.WithName("public"))
//	...
//	defer c.Unregister()
//
// The instruments, and the promcollector series that OpenTelemetry's
// Prometheus exporter (go.opentelemetry.io/otel/exporters/prometheus) turns
// each into, with the same names, labels, types, help and figures (the
// exporter adds its otel_scope_* labels and target_info by default), so
// dashboards and alerts work whichever module feeds them:
//
//	OpenTelemetry                    instrument                    unit       Prometheus (promcollector)
//	addrlimit.requests               Int64ObservableCounter        {request}  addrlimit_requests_total{policy,outcome}
//	addrlimit.limit_denials          Int64ObservableCounter        {request}  addrlimit_limit_denials_total{policy,limit}
//	addrlimit.refunded               Int64ObservableCounter        {request}  addrlimit_refunded_total
//	addrlimit.credentialed_limited   Int64ObservableCounter        {request}  addrlimit_credentialed_limited_total
//	addrlimit.retired_token_limited  Int64ObservableCounter        {request}  addrlimit_retired_token_limited_total
//	addrlimit.key_errors             Int64ObservableCounter        {request}  addrlimit_key_errors_total
//	addrlimit.store_errors           Int64ObservableCounter        {error}    addrlimit_store_errors_total
//	addrlimit.evictions              Int64ObservableCounter        {key}      addrlimit_evictions_total
//	addrlimit.keys                   Int64ObservableUpDownCounter  {key}      addrlimit_keys{policy}
//	addrlimit.approx_keys            Int64ObservableUpDownCounter  {key}      addrlimit_approx_keys
//	addrlimit.approx_fill            Float64ObservableGauge        1          addrlimit_approx_fill_ratio
//	addrlimit.in_flight              Int64ObservableUpDownCounter  {request}  addrlimit_in_flight{policy}
//	addrlimit.in_flight_waiting      Int64ObservableUpDownCounter  {request}  addrlimit_in_flight_waiting{policy}
//	addrlimit.in_flight_limited      Int64ObservableCounter        {request}  addrlimit_in_flight_limited_total{policy}
//	addrlimit.identity_exempt        Int64ObservableCounter        {request}  addrlimit_identity_exempt_total{identity}
//	addrlimit.identity_retired_token_limited
//	                                 Int64ObservableCounter        {request}  addrlimit_identity_retired_token_limited_total{identity}
//
// addrlimit.requests has the attributes policy and outcome: "allowed" and
// "limited" (dry-run decisions included) for each policy, and "exempt" with
// policy="" (exempt requests bypass the limiter before a policy is chosen; no
// policy can have the empty name). addrlimit.limit_denials has the
// attributes policy and limit: the limited requests of each limit of each
// policy, by the limit that denied them (Decision.Limit). addrlimit.keys has
// the attribute policy, as the addrlimit.in_flight* instruments do, which are reported for the policies with an in-flight limit
// (addrlimit.Policy.InFlight) only. The addrlimit.identity_* instruments have the
// attribute identity, one per name of addrlimit.NewIdentities (requests with
// anonymous secrets count only in the totals).
// With WithName every observation also carries the attribute limiter. Counters
// saturate at the largest int64 instead of wrapping.
//
// docs/observability.md ("Metrics") says what to alert on.
package otelcollector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/addrlimit/addrlimit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// An Option configures New.
type Option func(*config)

type config struct {
	name string
}

// WithName adds the attribute limiter=name to every observation. Give every
// collector that reports to one Meter a distinct name: the OpenTelemetry API
// requires callbacks to make distinct observations. An empty name adds no
// attribute. It labels the collector's observations only: the limiter's
// policy names (addrlimit.WithName, WithPolicy) are the separate "policy"
// attribute.
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// Collector reports one Limiter's Stats to a Meter until Unregister. It is
// safe for concurrent use.
type Collector struct {
	reg  metric.Registration
	once sync.Once
	err  error
}

type instruments struct {
	requests, refunded, credentialed, retired metric.Int64ObservableCounter
	denials                                   metric.Int64ObservableCounter
	keyErrors, storeErrors, evictions         metric.Int64ObservableCounter
	identityExempt, identityRetired           metric.Int64ObservableCounter
	inFlightLimited                           metric.Int64ObservableCounter
	keys, approxKeys, inFlight, inFlightWait  metric.Int64ObservableUpDownCounter
	approxFill                                metric.Float64ObservableGauge
}

// New creates the instruments on meter and registers one callback that
// reports lim.Stats() at every collection. lim and meter must not be nil.
// It returns the meter's error if an instrument or the callback cannot be
// registered.
func New(lim *addrlimit.Limiter, meter metric.Meter, opts ...Option) (*Collector, error) {
	if lim == nil {
		return nil, errors.New("otelcollector: New called with a nil Limiter")
	}
	if meter == nil {
		return nil, errors.New("otelcollector: New called with a nil Meter")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}

	var in instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.requests = counter("addrlimit.requests", "{request}", `Requests decided by the rate limiter: allowed or limited (dry-run included) per policy, exempt with policy="".`)
	in.denials = counter("addrlimit.limit_denials", "{request}", "Limited requests (dry-run included) by the limit of their policy that denied them.")
	in.refunded = counter("addrlimit.refunded", "{request}", "Allowed requests whose tokens were given back because of their response status (WithRefund).")
	in.credentialed = counter("addrlimit.credentialed_limited", "{request}", "Limited requests that carried an Authorization header. A weak hint: any client can send one.")
	in.retired = counter("addrlimit.retired_token_limited", "{request}", "Limited requests that carried a retired internal token secret: a caller that missed a rotation, or a leaked old secret.")
	in.keyErrors = counter("addrlimit.key_errors", "{request}", "Requests whose key, policy or cost could not be determined cleanly; each was still charged.")
	in.storeErrors = counter("addrlimit.store_errors", "{error}", "Store failures, decided by the limiter's failure policy.")
	in.evictions = counter("addrlimit.evictions", "{key}", "Buckets moved out of the exact in-memory table into the approximate memory, to make room.")
	in.identityExempt = counter("addrlimit.identity_exempt", "{request}", "Requests exempted by a secret of the named internal identity.")
	in.identityRetired = counter("addrlimit.identity_retired_token_limited", "{request}", "Limited requests that carried a retired secret of the named internal identity: that service missed a rotation.")
	in.inFlightLimited = counter("addrlimit.in_flight_limited", "{request}", "Requests refused by the in-flight limit of their policy (counted as limited too).")
	var err error
	in.inFlight, err = meter.Int64ObservableUpDownCounter("addrlimit.in_flight", metric.WithUnit("{request}"), metric.WithDescription("In-flight slots held in this process's memory, per policy with an in-flight limit."))
	errs = append(errs, err)
	in.inFlightWait, err = meter.Int64ObservableUpDownCounter("addrlimit.in_flight_waiting", metric.WithUnit("{request}"), metric.WithDescription("Requests waiting for an in-flight slot (WithInFlightWait), per policy with an in-flight limit; they hold none."))
	errs = append(errs, err)
	in.keys, err = meter.Int64ObservableUpDownCounter("addrlimit.keys", metric.WithUnit("{key}"), metric.WithDescription("Exact buckets held in this process's memory (with a remote store: the local mirror kept under FailLocal, not the store's own buckets)."))
	errs = append(errs, err)
	in.approxKeys, err = meter.Int64ObservableUpDownCounter("addrlimit.approx_keys", metric.WithUnit("{key}"), metric.WithDescription("Estimated number of keys whose state lives only in the approximate memory."))
	errs = append(errs, err)
	in.approxFill, err = meter.Float64ObservableGauge("addrlimit.approx_fill", metric.WithUnit("1"), metric.WithDescription("Fraction (0 to 1) of the approximate memory's cells still holding a future time, in the fullest policy's table; 0 until a table first fills."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelcollector: creating instruments: %w", err)
	}

	var base []attribute.KeyValue
	if cfg.name != "" {
		base = []attribute.KeyValue{attribute.String("limiter", cfg.name)}
	}
	attrs := func(kv ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributes(append(kv, base...)...)
	}
	plain := attrs()
	observe := func(_ context.Context, o metric.Observer) error {
		s := lim.Stats()
		policies := lim.Policies()
		for i, p := range s.Policies {
			policy := attribute.String("policy", p.Name)
			o.ObserveInt64(in.requests, clamp(p.Allowed), attrs(policy, attribute.String("outcome", "allowed")))
			o.ObserveInt64(in.requests, clamp(p.Limited), attrs(policy, attribute.String("outcome", "limited")))
			o.ObserveInt64(in.keys, int64(p.Keys), attrs(policy))
			for _, l := range p.Limits {
				o.ObserveInt64(in.denials, clamp(l.Limited), attrs(policy, attribute.String("limit", l.Name)))
			}
			if policies[i].InFlight > 0 {
				o.ObserveInt64(in.inFlight, int64(p.InFlight), attrs(policy))
				o.ObserveInt64(in.inFlightWait, int64(p.InFlightWaiting), attrs(policy))
				o.ObserveInt64(in.inFlightLimited, clamp(p.InFlightLimited), attrs(policy))
			}
		}
		o.ObserveInt64(in.requests, clamp(s.Exempt), attrs(attribute.String("policy", ""), attribute.String("outcome", "exempt")))
		o.ObserveInt64(in.refunded, clamp(s.Refunded), plain)
		o.ObserveInt64(in.credentialed, clamp(s.CredentialedLimited), plain)
		o.ObserveInt64(in.retired, clamp(s.RetiredTokenLimited), plain)
		o.ObserveInt64(in.keyErrors, clamp(s.KeyErrors), plain)
		o.ObserveInt64(in.storeErrors, clamp(s.StoreErrors), plain)
		o.ObserveInt64(in.evictions, clamp(s.Evictions), plain)
		o.ObserveInt64(in.approxKeys, int64(s.ApproxKeys), plain)
		o.ObserveFloat64(in.approxFill, s.ApproxFill, plain)
		for _, id := range s.Identities {
			identity := attrs(attribute.String("identity", id.Name))
			o.ObserveInt64(in.identityExempt, clamp(id.Exempt), identity)
			o.ObserveInt64(in.identityRetired, clamp(id.RetiredTokenLimited), identity)
		}
		return nil
	}
	reg, err := meter.RegisterCallback(observe,
		in.requests, in.denials, in.refunded, in.credentialed, in.retired, in.keyErrors, in.storeErrors, in.evictions,
		in.keys, in.approxKeys, in.approxFill, in.identityExempt, in.identityRetired, in.inFlight, in.inFlightWait, in.inFlightLimited)
	if err != nil {
		return nil, fmt.Errorf("otelcollector: registering the callback: %w", err)
	}
	return &Collector{reg: reg}, nil
}

// Unregister removes the callback from the Meter: later collections report
// nothing for this limiter. It is idempotent; every call returns the first
// call's result.
func (c *Collector) Unregister() error {
	c.once.Do(func() { c.err = c.reg.Unregister() })
	return c.err
}

// clamp converts a counter to the int64 the API takes, saturating instead of
// wrapping to a negative value.
func clamp(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
