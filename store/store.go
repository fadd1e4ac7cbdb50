// Package store is what a Store author implements for addrlimit, and what
// it is given: the interfaces a Limiter built with addrlimit.WithStore calls
// (Store, and the optional DebtStore, PolicyChecker and InFlightStore), the
// Policy every call names and the Result every call returns. Users of the
// middleware need none of it but Policy and Limit, which package addrlimit
// re-exports. Package storetest is the conformance suite every Store should
// pass; the redisstore module is the Store for a fleet.
//
// The package imports the standard library only.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/internal/limits"
)

// Limit is one token bucket of a policy: capacity Burst, refilled one token
// every Interval. N requests per period P in bursts of B is
// Limit{Burst: B, Interval: P / N}.
type Limit struct {
	// Name labels the limit in the RateLimit fields of a policy of several
	// limits, in Decision.Limit and in the metrics' "limit" label. Empty, it
	// is named by its window, Burst × Interval rounded up to whole seconds:
	// "1s", "1m", "1h", "1d" (a whole number of days, hours, minutes or
	// else seconds: "90s", "2h"). A name follows the rules of a policy name.
	Name     string
	Burst    int
	Interval time.Duration
}

// MaxLimits bounds the limits of one policy: a Decision and a Result carry
// the state of each in a fixed array, so that several limits cost no
// allocation.
const MaxLimits = limits.Max

// Policy is a set of limits applied together to each key, under the name
// Name: a request is admitted only if every limit has its cost, and when
// any limit denies it, none is charged. 10 per second and 300 per minute
// and 10,000 per day is
//
//	addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{
//		{Burst: 10, Interval: time.Second / 10},
//		{Burst: 300, Interval: time.Minute / 300},
//		{Burst: 10000, Interval: 24 * time.Hour / 10000},
//	}}
//
// (addrlimit.Policy is this type). The name appears in the
// RateLimit-Policy header field, in Stats and in metrics, and is part of
// the buckets' identity in a Store (see Store). A Limiter keeps its own
// copy of Limits, with every Name filled in.
//
// InFlight, above 0, also bounds how many of a key's requests may run at
// once (addrlimit.WithInFlight sets it on the default policy): a request
// must pass the rate limits and find a free slot, held until its handler
// returns. It is not part of the buckets' identity. A policy with InFlight
// may have no rate limit: it has no buckets then, and a Limiter never
// calls Take, Peek, Refund or Reset with it (a Store may refuse it there).
type Policy struct {
	Name     string
	Limits   []Limit
	InFlight int
}

// MaxInFlight bounds Policy.InFlight.
const MaxInFlight = 1 << 20

// Validate reports whether a Limiter accepts p: Name is 1 to 64 bytes of
// A-Z a-z 0-9 . _ - (so that it needs no escaping in a header field, a
// metric label or a store key); p has 1 to MaxLimits limits (or none with
// an InFlight above 0), each with a
// Burst of at least 1, a positive Interval, and Burst × Interval within
// the bucket arithmetic (a full refill of under about 73 years); InFlight
// is 0 to MaxInFlight; the limits' names (given or derived, see Limit.Name) are distinct, and with
// several limits, Name, "-" and a limit's name (the limit's entry in the
// RateLimit fields) make at most 64 bytes. addrlimit.WithPolicy calls it;
// a Store may call it on the policies it is given, so that one rule holds
// everywhere.
func (p Policy) Validate() error {
	if err := headers.CheckName(p.Name); err != nil {
		return fmt.Errorf("addrlimit: %w", err)
	}
	if p.InFlight < 0 || p.InFlight > MaxInFlight {
		return fmt.Errorf("addrlimit: policy %q: in-flight limit must be 0 (none) to %d, got %d", p.Name, MaxInFlight, p.InFlight)
	}
	if len(p.Limits) == 0 && p.InFlight == 0 {
		return fmt.Errorf("addrlimit: policy %q: has no limit: give it 1 to %d rate limits, an in-flight limit (InFlight), or both", p.Name, MaxLimits)
	}
	if len(p.Limits) > MaxLimits {
		return fmt.Errorf("addrlimit: policy %q: has %d limits, not 1 to %d", p.Name, len(p.Limits), MaxLimits)
	}
	for i, lim := range p.Limits {
		if err := p.checkLimit(i, lim); err != nil {
			if len(p.Limits) == 1 {
				return fmt.Errorf("addrlimit: policy %q: %w", p.Name, err)
			}
			return fmt.Errorf("addrlimit: policy %q: limit %d: %w", p.Name, i+1, err)
		}
	}
	return nil
}

// checkLimit reports whether lim may be limit i of p (see Validate).
func (p Policy) checkLimit(i int, lim Limit) error {
	if lim.Burst < 1 {
		return fmt.Errorf("burst must be at least 1, got %d", lim.Burst)
	}
	if lim.Interval <= 0 {
		return fmt.Errorf("interval must be positive, got %v", lim.Interval)
	}
	if _, err := bucket.NewPolicy(lim.Burst, lim.Interval); err != nil {
		return err
	}
	name := lim.name()
	if err := headers.CheckName(name); err != nil {
		return fmt.Errorf("limit name: %w", err)
	}
	if len(p.Limits) > 1 {
		if err := headers.CheckName(p.Name + "-" + name); err != nil {
			return fmt.Errorf("its name in the RateLimit fields: %w", err)
		}
	}
	for j := range i {
		if p.Limits[j].name() == name {
			return fmt.Errorf("limits %d and %d are both named %q: name them", j+1, i+1, name)
		}
	}
	return nil
}

// name is lim's name: Name, or one derived from its window.
func (lim Limit) name() string { return limits.Name(lim.Name, lim.Burst, lim.Interval) }

// Result is a Store's answer about one key's buckets under a policy. Every
// field follows from Allowed and Resets (see Policy.Result, which a Store
// may use to fill it in): Remaining, RetryAfter and ResetAfter report the
// tightest limit, the one with the longest wait for the tokens the call
// needed (n for a denied Take of n, else 1), or if no limit must wait, the
// one holding the fewest tokens, fractions counted (of equals, the first).
type Result struct {
	// Allowed reports, for Take, whether the tokens were charged (to every
	// limit); for Peek and Refund, whether every limit holds at least one
	// whole token now.
	Allowed bool
	// Remaining is the number of whole tokens left after the call in the
	// tightest limit.
	Remaining int
	// RetryAfter is how long until the request can succeed: for a denied
	// Take of n tokens, until every limit holds n tokens; otherwise, until
	// every limit holds one whole token, which is zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the tightest limit's bucket is full
	// again.
	ResetAfter time.Duration
	// Resets holds, for each limit of the policy in order, the time until
	// its bucket is full again (entries past the policy's limits are zero).
	// It is each bucket's whole state: a Limiter uses it to continue locally
	// from what a remote store last said (see addrlimit.FailLocal). For a
	// policy of one limit a Store may leave it zero: ResetAfter is then that
	// state.
	Resets [MaxLimits]time.Duration
}

// Result returns the Result of buckets whose times until full are resets
// (in the order of p.Limits) after a call that needed need tokens (a denied
// Take of n: n; otherwise 1), with Allowed as given. It is the one rule by
// which the other fields follow from Resets: the in-memory store uses it,
// and other Stores may.
func (p Policy) Result(allowed bool, need int, resets [MaxLimits]time.Duration) Result {
	var ls [MaxLimits]limits.Limit
	for i, lim := range p.Limits {
		ls[i] = limits.Limit{Burst: lim.Burst, Interval: lim.Interval}
	}
	res := Result{Allowed: allowed, Resets: resets}
	_, res.Remaining, res.RetryAfter, res.ResetAfter = limits.Summarize(ls[:len(p.Limits)], need, &resets)
	return res
}

// Store keeps token buckets, one per (policy, limit, key). The in-memory
// store that a Limiter uses by default is built in; addrlimit.WithStore
// plugs in another, such as the redisstore module.
//
// Contract, for every method:
//   - Buckets of different policies are distinct: the policy's Name and
//     each limit's Burst and Interval, in order, belong to a bucket's
//     identity (a limit's Name does not), so two limiters with different
//     policies on one store never share a bucket. Two policies with the
//     same identity share their buckets, which is how a fleet shares one
//     budget.
//   - Each call is atomic over every limit of the policy: concurrent calls
//     for one key, from one process or many, never let more than Burst
//     tokens through a full bucket of any limit.
//   - Decisions are those of token buckets (GCRA), all or nothing: Take of
//     n at an instant when every limit's bucket holds at least n tokens
//     removes n from each; otherwise it is denied and changes nothing in
//     any of them. One instant (one clock reading) serves every limit.
//   - The Limiter passes 1 <= n <= the smallest Burst of p, a valid policy
//     whose limits are all named, and non-empty keys (the strings its
//     KeyFunc returned, addrlimit.UnkeyedKey, or keys given to
//     Limiter.AllowKey). Keys may hold any bytes.
//   - Take and Refund get the request's context without its cancellation
//     (context.WithoutCancel): a client that hangs up does not end the
//     decision or its refund, so a store bounds each call by a timeout of
//     its own.
//   - A non-nil error means the store could not answer (a remote store timed
//     out, say). The Limiter then applies its failure policy (see
//     addrlimit.WithStoreFailure) and reports the error to observers, never
//     to the client. Errors should start with the store's package name.
//
// Implementations must be safe for concurrent use. A store that cannot
// represent every valid policy implements [PolicyChecker], so that New
// refuses such a policy instead of every decision failing.
type Store interface {
	// Take charges n tokens to each of key's buckets under p, or none.
	Take(ctx context.Context, key string, p Policy, n int) (Result, error)
	// Refund gives n tokens back to each of key's buckets under p, never
	// filling one above its Burst (refunding a full or missing bucket
	// changes nothing).
	Refund(ctx context.Context, key string, p Policy, n int) (Result, error)
	// Peek reports key's buckets under p without changing them.
	Peek(ctx context.Context, key string, p Policy) (Result, error)
	// Reset makes each of key's buckets under p full, as if it had never
	// been used. Resetting a key that has no bucket is not an error.
	Reset(ctx context.Context, key string, p Policy) error
}

// PolicyChecker is implemented by a Store whose buckets have bounds of their
// own (a remote store's arithmetic, say). New calls CheckPolicy once for
// every policy of a Limiter built WithStore and fails with its error, which
// should name the bound; the Limiter never passes the store a policy it
// refused.
type PolicyChecker interface {
	CheckPolicy(p Policy) error
}

// DebtStore is a Store that can be told what a Limiter spent without it.
// Under addrlimit.FailLocal, the tokens that an instance's local fallback
// charges while the store fails are a debt of that key; the Limiter pays it
// with the key's next Take that reaches the store, so that the shared
// bucket learns what every instance spent in the meantime. Without it, a
// store that fails and answers in turn (a flapping network, a failover)
// lets each instance spend on its own what the store never hears of
// (docs/redis.md gives the figures).
//
// The redisstore module implements it. storetest checks it for stores that
// implement it.
type DebtStore interface {
	Store
	// TakeWithDebt charges debt tokens to each of key's buckets under p
	// whether or not it holds them, then does what Take(ctx, key, p, n)
	// does, in one atomic step; debt 0 is Take. A debt may leave a bucket
	// below empty, by at most its Burst: its entry of Result.Resets is then
	// up to twice its Burst × Interval and Remaining is 0. A bucket full
	// since the debt was incurred still pays it: the Limiter forgets debts
	// older than the policy's longest full refill (Burst × Interval)
	// instead. The Limiter passes 0 <= debt <= 2 × the smallest Burst of p.
	// After an error the Limiter keeps the debt for a later Take: a store
	// that charged it and then failed (a timeout after Redis ran the call)
	// has then been charged twice, which limits more, never less.
	TakeWithDebt(ctx context.Context, key string, p Policy, n, debt int) (Result, error)
}
