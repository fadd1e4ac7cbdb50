// Package addrlimit is net/http middleware that limits each client address
// with a token bucket and lets your own services through by identity, not by
// address.
//
// A per-address limit assumes one address is one caller. Your own
// infrastructure breaks that assumption: an edge, an orchestrator or an
// access gate reaches the API from a few shared egress addresses, and a limit
// meant for one person throttles whole services. addrlimit keeps the limit
// for everyone else exactly as it was and exempts requests that carry your
// internal bearer token, checked in constant time ([InternalToken]). A wrong
// or forged token gets no pass: it is counted like any other request.
//
//	tok, err := addrlimit.NewInternalToken(os.Getenv("INTERNAL_TOKEN"))
//	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithExempt(tok.Match))
//	mux.Handle("/internal/", tok.Require(internalRoutes))
//	http.ListenAndServe(addr, lim.Handler(mux))
//
// Each key (by default the peer address from RemoteAddr, IPv6 grouped by /64;
// see [RemoteAddrKey] and [TrustedProxyKey]) gets a bucket of burst tokens
// (default: limit) refilled at limit per period: 300 per minute means 300 at
// once, then one more every 200 ms. The decisions are those of
// golang.org/x/time/rate's rate.NewLimiter(rate.Every(per/limit), burst).
// Limited requests get 429 with Retry-After; every counted response carries
// RateLimit and RateLimit-Policy fields ([HeaderStyle]). Memory stays bounded
// ([MemoryStore]); fleets share a budget through a [Store] such as the
// redisstore module; [Limiter.Stats], [WithObserver] and [LogObserver] show who
// gets throttled.
package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/counter"
	"github.com/addrlimit/addrlimit/internal/headers"
)

// Outcome says what a Limiter did with a request. The zero value is not an
// outcome.
type Outcome uint8

const (
	// Allowed: the request was counted and may proceed.
	Allowed Outcome = iota + 1
	// Limited: the request was counted against an empty bucket and is denied
	// (or, in dry-run mode, would have been).
	Limited
	// Exempt: the exemption predicate matched; nothing was counted.
	Exempt
)

// String returns "allowed", "limited" or "exempt".
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Limited:
		return "limited"
	case Exempt:
		return "exempt"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Decision describes what a Limiter decided for one request. For an Exempt
// decision every other field is zero.
type Decision struct {
	Outcome Outcome
	// Key is the bucket the request was charged to (UnkeyedKey when it had
	// none). Treat it as personal data: it is usually a client address.
	Key string
	// Limit is the bucket capacity (the burst); Remaining the whole tokens left
	// after this request.
	Limit, Remaining int
	// RetryAfter is the time until the bucket holds a whole token again: for a
	// Limited request, when to retry. Zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	// DryRun is set on a Limited decision that was let through by WithDryRun.
	DryRun bool
	// Degraded is set when the Store failed and the failure policy decided.
	Degraded bool
	// Err is why the key or the store failed, for observers and logs; it is
	// never sent to the client. A non-nil Err never means the limit was skipped.
	Err error
}

// Denied reports whether the request must be refused: Limited and not a dry run.
func (d Decision) Denied() bool { return d.Outcome == Limited && !d.DryRun }

// Limiter limits requests per key. Build it with New; it is immutable and safe
// for concurrent use, and starts no goroutine.
type Limiter struct {
	policy    Policy
	keyFunc   KeyFunc
	exempt    func(*http.Request) bool
	denied    http.Handler
	observers []func(*http.Request, Decision)
	dryRun    bool
	failure   FailurePolicy
	store     Store
	mem       *MemoryStore  // the store itself or the local fallback
	fast      *bucket.Table // set when keys are RemoteAddr and the store is mem
	headers   *headers.Writer

	// Counters of what the in-memory table does not count itself.
	remoteAllowed, remoteLimited, exempted, credentialed, keyErrors, storeErrors counter.Striped
}

// New returns a Limiter that lets each key make limit requests per period
// per, in bursts of up to limit (see WithBurst). It validates everything once:
// limit >= 1, per > 0, at most one request per nanosecond, and every option;
// errors start with "addrlimit: ".
func New(limit int, per time.Duration, opts ...Option) (*Limiter, error) {
	if limit < 1 {
		return nil, fmt.Errorf("addrlimit: limit must be at least 1, got %d", limit)
	}
	if per <= 0 {
		return nil, fmt.Errorf("addrlimit: period must be positive, got %v", per)
	}
	interval := per / time.Duration(limit)
	if interval < 1 {
		return nil, fmt.Errorf("addrlimit: %d per %v is more than one request per nanosecond", limit, per)
	}
	c := config{burst: limit, maxKeys: DefaultMaxKeys}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("addrlimit: option %d is nil", i+1)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		policy:    Policy{Burst: c.burst, Interval: interval},
		keyFunc:   c.keyFunc,
		exempt:    c.exempt,
		denied:    c.denied,
		observers: c.observers,
		dryRun:    c.dryRun,
		failure:   c.failure,
		store:     c.store,
	}
	if m, ok := c.store.(*MemoryStore); ok {
		l.mem = m
	} else {
		m, err := NewMemoryStore(c.maxKeys)
		if err != nil {
			return nil, err
		}
		l.mem = m
		if c.store == nil {
			l.store = m
		}
	}
	table, err := l.mem.bind(l.policy) // validates the policy
	if err != nil {
		return nil, err
	}
	style, _ := c.headers.internal()
	l.headers = headers.New(style, c.burst, interval)
	if l.keyFunc == nil {
		l.keyFunc = RemoteAddrKey
		if l.store == l.mem {
			l.fast = table
		}
	}
	return l, nil
}

// Policy returns the bucket shape the limiter enforces.
func (l *Limiter) Policy() Policy { return l.policy }

// Handler returns middleware that decides each request before next sees it.
// Exempt requests go straight to next, untouched. Counted requests get the
// quota header fields; a denied one gets 429 Too Many Requests with
// Retry-After (whole seconds, at least 1, from the bucket) and
// Cache-Control: no-store, or the WithDeniedHandler response. Observers run
// before anything is written. It panics if next is nil.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("addrlimit: Limiter.Handler called with a nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := l.decide(r, len(l.observers) > 0)
		for _, f := range l.observers {
			f(r, d)
		}
		if d.Outcome == Exempt {
			next.ServeHTTP(w, r)
			return
		}
		denied := d.Denied()
		switch {
		case d.Degraded && l.failure == FailClosed:
			if denied {
				l.headers.WriteUnavailable(w.Header())
			}
		case d.Degraded && l.failure == FailOpen:
			// The quota is unknown: send no quota fields.
		default:
			l.headers.Write(w.Header(), headers.State{
				Remaining:  d.Remaining,
				RetryAfter: d.RetryAfter,
				ResetAfter: d.ResetAfter,
				Denied:     denied,
			})
		}
		if denied {
			l.deny(w, r, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Allow decides and counts r exactly as Handler would and tells the
// observers, but writes nothing: for gRPC gateways, websockets or job
// queues. Refuse the work when the Decision is Denied.
func (l *Limiter) Allow(r *http.Request) Decision {
	d := l.decide(r, true)
	for _, f := range l.observers {
		f(r, d)
	}
	return d
}

var errEmptyKey = errors.New("addrlimit: KeyFunc returned an empty key")

// decide charges r to its bucket. The key string is formatted only when
// wantKey is set or the request is limited: the default path hashes the
// address bytes and allocates nothing.
//
// Counting: decisions taken by the in-memory table are counted there, under
// its shard lock; decisions of a remote store or of the failure policy are
// counted here.
func (l *Limiter) decide(r *http.Request, wantKey bool) Decision {
	if l.exempt != nil && l.exempt(r) {
		l.exempted.Inc()
		return Decision{Outcome: Exempt}
	}
	if l.fast != nil {
		if a, err := peerAddr(r); err == nil {
			d := l.fromResult(l.mem.takeAddr(l.fast, keyAddr(a)))
			if d.Outcome == Limited {
				l.countLimited(r)
				d.Key = AddrKey(a)
			} else if wantKey {
				d.Key = AddrKey(a)
			}
			return d
		}
	}
	key, keyErr := l.keyFunc(r)
	if key == "" {
		if keyErr == nil {
			keyErr = errEmptyKey
		}
		key = UnkeyedKey
	}
	if keyErr != nil {
		l.keyErrors.Inc()
	}
	d := l.take(r.Context(), key)
	d.Key = key
	d.Err = errors.Join(keyErr, d.Err)
	if d.Outcome == Limited {
		l.countLimited(r)
	}
	return d
}

// take asks the store, applying the failure policy when it errs.
func (l *Limiter) take(ctx context.Context, key string) Decision {
	res, err := l.store.Take(ctx, key, l.policy)
	if err == nil {
		d := l.fromResult(res)
		if l.store != l.mem {
			l.countRemote(d)
		}
		return d
	}
	l.storeErrors.Inc()
	var d Decision
	switch l.failure {
	case FailOpen:
		d = Decision{Outcome: Allowed, Limit: l.policy.Burst}
		l.countRemote(d)
	case FailClosed:
		d = Decision{Outcome: Limited, Limit: l.policy.Burst, RetryAfter: time.Second}
		d.DryRun = l.dryRun
		l.countRemote(d)
	default:
		res, _ := l.mem.Take(ctx, key, l.policy) // same policy: cannot fail; counted by the table
		d = l.fromResult(res)
	}
	d.Degraded, d.Err = true, err
	return d
}

func (l *Limiter) fromResult(res Result) Decision {
	d := Decision{
		Outcome:    Allowed,
		Limit:      l.policy.Burst,
		Remaining:  res.Remaining,
		RetryAfter: res.RetryAfter,
		ResetAfter: res.ResetAfter,
	}
	if !res.Allowed {
		d.Outcome, d.DryRun = Limited, l.dryRun
	}
	return d
}

// countRemote counts a decision that the in-memory table did not take.
func (l *Limiter) countRemote(d Decision) {
	if d.Outcome == Allowed {
		l.remoteAllowed.Inc()
	} else {
		l.remoteLimited.Inc()
	}
}

// countLimited notes a limited request that carried credentials.
func (l *Limiter) countLimited(r *http.Request) {
	if len(r.Header["Authorization"]) > 0 {
		l.credentialed.Inc()
	}
}

type decisionKey struct{}

// DecisionFromContext returns the Decision that a Limiter stored in the
// context of the request it passes to a WithDeniedHandler handler.
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

func (l *Limiter) deny(w http.ResponseWriter, r *http.Request, d Decision) {
	if l.denied != nil {
		l.denied.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
		return
	}
	status, body := http.StatusTooManyRequests, "too many requests\n"
	if d.Degraded && l.failure == FailClosed {
		status, body = http.StatusServiceUnavailable, "service unavailable\n"
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// Stats is a snapshot of a Limiter's counters, all since New.
type Stats struct {
	// Decisions by outcome. Limited includes dry-run decisions.
	Allowed, Limited, Exempt uint64
	// CredentialedLimited counts Limited requests that carried an
	// Authorization header: the signature of an internal service whose token
	// is missing or stale. Alert on it.
	CredentialedLimited uint64
	// KeyErrors counts requests whose KeyFunc failed (charged to UnkeyedKey,
	// or to the key it still returned); StoreErrors counts Store failures.
	KeyErrors, StoreErrors uint64
	// Keys is the number of buckets in the in-memory store (the default store,
	// or the local fallback of a remote one); Evictions counts buckets dropped
	// before they had refilled, to make room; Overflows counts requests charged
	// to the shared overflow bucket because the table was full of empty buckets.
	Keys                 int
	Evictions, Overflows uint64
}

// Stats returns the counters. It is safe to call concurrently with requests,
// costs a pass over the table's shards, and suits expvar.Func or a metrics
// collector that reads it at scrape time.
func (l *Limiter) Stats() Stats {
	allowed, limited := l.mem.counts()
	return Stats{
		Allowed:             allowed + l.remoteAllowed.Load(),
		Limited:             limited + l.remoteLimited.Load(),
		Exempt:              l.exempted.Load(),
		CredentialedLimited: l.credentialed.Load(),
		KeyErrors:           l.keyErrors.Load(),
		StoreErrors:         l.storeErrors.Load(),
		Keys:                l.mem.Len(),
		Evictions:           l.mem.Evictions(),
		Overflows:           l.mem.Overflows(),
	}
}
