package addrlimit

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/headers"
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
const MaxLimits = 4

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
// A Limiter has a default policy (New's limit and period, WithBurst,
// WithLimit, WithName) and any number of named ones, which you construct and
// give to WithPolicy. The name appears in the RateLimit-Policy header field,
// in Stats and in metrics, and is part of the buckets' identity in a Store.
// A Limiter keeps its own copy of Limits, with every Name filled in.
//
// InFlight, when above 0, also bounds how many of a key's requests may run
// at once under the policy (see WithInFlight, which sets it for the default
// policy): a request must pass the rate limits and find a free slot, and
// holds its slot until its handler returns. It is not part of the
// buckets' identity in a Store.
type Policy struct {
	Name     string
	Limits   []Limit
	InFlight int
}

// Validate reports whether a Limiter accepts p: Name is 1 to 64 bytes of
// A-Z a-z 0-9 . _ - (so that it needs no escaping in a header field, a
// metric label or a store key); p has 1 to MaxLimits limits, each with a
// Burst of at least 1, a positive Interval, and Burst × Interval within
// the bucket arithmetic (a full refill of under about 73 years); InFlight
// is 0 to MaxInFlight; the limits' names (given or derived, see
// Limit.Name) are distinct, and with
// several limits, Name, "-" and a limit's name (the limit's entry in the
// RateLimit fields) make at most 64 bytes. WithPolicy calls it; a Store may
// call it on the policies it is given, so that one rule holds everywhere.
func (p Policy) Validate() error {
	if err := checkPolicyName(p.Name); err != nil {
		return err
	}
	if p.InFlight < 0 || p.InFlight > MaxInFlight {
		return fmt.Errorf("addrlimit: policy %q: in-flight limit must be 0 (none) to %d, got %d", p.Name, MaxInFlight, p.InFlight)
	}
	if len(p.Limits) < 1 || len(p.Limits) > MaxLimits {
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
func (lim Limit) name() string {
	if lim.Name != "" {
		return lim.Name
	}
	w := headers.Window(lim.Burst, lim.Interval)
	for _, u := range [...]struct {
		secs int
		unit string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}} {
		if w%u.secs == 0 {
			return strconv.Itoa(w/u.secs) + u.unit
		}
	}
	return strconv.Itoa(w) + "s"
}

// wait is read's wait, without its division.
func (lim Limit) wait(full time.Duration, need int) time.Duration {
	return max(max(full, 0)+time.Duration(need)*lim.Interval-lim.tau(), 0)
}

// fewer reports whether a bucket of lim full after full holds fewer tokens,
// fractions counted, than a bucket of o full after ofull:
// (tau - full) / Interval < (o.tau - ofull) / o.Interval, both sides
// non-negative, multiplied out in 128 bits.
func (lim Limit) fewer(full time.Duration, o Limit, ofull time.Duration) bool {
	a := uint64(max(lim.tau()-max(full, 0), 0))
	b := uint64(max(o.tau()-max(ofull, 0), 0))
	ahi, alo := bits.Mul64(a, uint64(o.Interval))
	bhi, blo := bits.Mul64(b, uint64(lim.Interval))
	return ahi < bhi || ahi == bhi && alo < blo
}

// tau is lim's full refill time: Burst × Interval.
func (lim Limit) tau() time.Duration { return time.Duration(lim.Burst) * lim.Interval }

// read is what a bucket of lim reports when it is full after full: the
// whole tokens it holds (none while in debt) and the time until it holds
// need of them (bucket.Policy.Read).
func (lim Limit) read(full time.Duration, need int) (remaining int, wait time.Duration) {
	full = max(full, 0)
	remaining = int(max(lim.tau()-full, 0) / lim.Interval)
	wait = max(full+time.Duration(need)*lim.Interval-lim.tau(), 0)
	return remaining, wait
}

// named returns a copy of p with every limit named (see Limit.Name).
func (p Policy) named() Policy {
	q := Policy{Name: p.Name, Limits: make([]Limit, len(p.Limits)), InFlight: p.InFlight}
	for i, lim := range p.Limits {
		lim.Name = lim.name()
		q.Limits[i] = lim
	}
	return q
}

// headerLimits is p's limits as the header fields name them.
func (p Policy) headerLimits() []headers.Limit {
	out := make([]headers.Limit, len(p.Limits))
	for i, lim := range p.Limits {
		out[i] = headers.Limit{Name: lim.Name, Burst: lim.Burst, Interval: lim.Interval}
	}
	return out
}

// maxCost is the smallest Burst of p's limits: the largest cost that all
// of them can pay.
func (p Policy) maxCost() int {
	n := p.Limits[0].Burst
	for _, lim := range p.Limits[1:] {
		n = min(n, lim.Burst)
	}
	return n
}

// id is p's identity in a Store (see Store): its Name and each limit's
// Burst and Interval, in order. Policies with equal ids share buckets.
func (p Policy) id() string {
	b := []byte(p.Name)
	for _, lim := range p.Limits {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Burst), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(lim.Interval), 10)
	}
	return string(b)
}

// DefaultPolicyName names the default policy unless WithName says otherwise.
const DefaultPolicyName = "default"

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
	// from what a remote store last said (see FailLocal). For a policy of
	// one limit a Store may leave it zero: ResetAfter is then that state.
	Resets [MaxLimits]time.Duration
}

// Result returns the Result of buckets whose times until full are resets
// (in the order of p.Limits) after a call that needed need tokens (a denied
// Take of n: n; otherwise 1), with Allowed as given. It is the one rule by
// which the other fields follow from Resets: the in-memory store uses it,
// and other Stores may.
func (p Policy) Result(allowed bool, need int, resets [MaxLimits]time.Duration) Result {
	res := Result{Allowed: allowed, Resets: resets}
	p.summarize(&res, need)
	return res
}

// summarize sets the Remaining, RetryAfter and ResetAfter of res from its
// Resets, after a call that needed need tokens, and returns the index of
// the tightest limit. It divides once, however many limits p has: the
// limits are compared by their waits, and by their tokens as fractions
// compared by cross-multiplication.
func (p *Policy) summarize(res *Result, need int) (tight int) {
	if len(p.Limits) > 1 {
		tight = p.tightest(need, &res.Resets)
	}
	full := res.Resets[tight]
	res.Remaining, res.RetryAfter = p.Limits[tight].read(full, need)
	res.ResetAfter = max(full, 0)
	return tight
}

// tightest is the index of the tightest of p's several limits in the
// states resets, after a call that needed need tokens (see Result).
func (p *Policy) tightest(need int, resets *[MaxLimits]time.Duration) (tight int) {
	var longest time.Duration
	for i, lim := range p.Limits {
		if wait := lim.wait(resets[i], need); wait > longest {
			longest, tight = wait, i
		}
	}
	if longest == 0 {
		for i := 1; i < len(p.Limits); i++ {
			if p.Limits[i].fewer(resets[i], p.Limits[tight], resets[tight]) {
				tight = i
			}
		}
	}
	return tight
}

// tightestOf is the index of the tightest limit of res, a Result of a
// call that needed need tokens, by the rule of Result.
func (p *Policy) tightestOf(res *Result, need int) int {
	if len(p.Limits) == 1 {
		return 0
	}
	return p.tightest(need, &res.Resets)
}

// Store keeps token buckets, one per (policy, limit, key). The in-memory store that a
// Limiter uses by default is built in; WithStore plugs in another, such as
// the redisstore module. Package storetest is the conformance suite every
// Store should pass.
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
//     KeyFunc returned, UnkeyedKey, or keys given to Limiter.AllowKey).
//     Keys may hold any bytes.
//   - Take and the Peek of a refused cost get the request's context
//     without its cancellation (context.WithoutCancel): a client that hangs
//     up does not end the decision, so a store bounds each call by a timeout
//     of its own.
//   - A non-nil error means the store could not answer (a remote store timed
//     out, say). The Limiter then applies its failure policy (see
//     WithStoreFailure) and reports the error to observers, never to the
//     client. Errors should start with the store's package name.
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

// maxPolicyName bounds the length of a policy name.
const maxPolicyName = headers.MaxNameLen

// checkPolicyName reports whether name may name a policy (headers.CheckName).
func checkPolicyName(name string) error {
	if err := headers.CheckName(name); err != nil {
		return fmt.Errorf("addrlimit: %w", err)
	}
	return nil
}
