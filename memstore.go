package addrlimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/limits"
	"github.com/addrlimit/addrlimit/store"
	"sync/atomic"
)

// seam is the one way a Limiter reaches its buckets: by the key's hash
// (which is all the in-memory table needs, so the default path allocates
// nothing) and with the policy's state at hand. New picks one of its two
// implementations once: memStore, the default, or failover, a Store given
// to WithStore behind its failure policy. It is not a store.Store: storetest
// reaches failover through a Limiter built WithStore, as production does.
type seam interface {
	// take charges n tokens to k's buckets under ps.
	take(ctx context.Context, ps *lane, k bucketKey, n int) answer
	// peek reports k's bucket without changing it.
	peek(ctx context.Context, ps *lane, k bucketKey) answer
	// refund gives n tokens back to the bucket that paid them for a
	// decision (degraded: one the failure policy took), reports whether any
	// bucket got them, and returns that bucket's state.
	refund(ctx context.Context, ps *lane, k bucketKey, n int, degraded bool) (store.Result, bool, error)
	// reset makes k's bucket full.
	reset(ctx context.Context, ps *lane, k bucketKey) error
	// acquire takes an in-flight slot of k under ln (whose InFlight is
	// set), under the failure policy: the slot it returns is the zero slot
	// unless one was taken.
	acquire(ctx context.Context, ln *lane, k bucketKey) (slot, slotAnswer)
	// release frees a slot that acquire took, where it took it, and
	// returns a fleet store's error (the seam then retries or lets the
	// lease lapse), whether ctx is cancelled or not. It is called once per
	// slot.
	release(ctx context.Context, s slot) error
	// keys is how this seam's keys are made, for the Limiter to make them.
	keys() keyer
}

// bucketKey is a bucket's key as a seam gets it: its hash, and its string
// when the seam asked for strings (a remote store needs them; the in-memory
// table does not, so the default path never builds one).
type bucketKey struct {
	hash uint64
	s    string
}

// keyer makes the seam's bucketKeys: hashed with its seed, and with the
// string kept when the seam needs strings (a remote store) or the caller
// asks for it.
type keyer struct {
	seed    maphash.Seed
	strings bool
}

// of is the key s (which hashes as its bytes would).
func (kr keyer) of(s string) bucketKey { return bucketKey{hash: maphash.String(kr.seed, s), s: s} }

// ofBytes is the key b, with its string only if str is set or the seam
// needs strings: b may be on the caller's stack.
func (kr keyer) ofBytes(b []byte, str bool) bucketKey {
	k := bucketKey{hash: maphash.Bytes(kr.seed, b)}
	if str || kr.strings {
		k.s = string(b)
	}
	return k
}

// answer is a seam's answer to take and peek.
type answer struct {
	store.Result
	tight   int   // the index of the tightest limit (see Result)
	err     error // the store failed and the failure policy decided
	unknown bool  // the quota is unknown (FailOpen, FailClosed): Decision.QuotaUnknown
	// lane is the lane whose table answered, when a table did: the
	// caller's, or the one that took over its buckets (SetPolicies).
	lane *lane
}

// lane is the store's half of a policy: the policy with every limit named,
// its limits for their arithmetic, its table (the buckets, or a remote
// store's local mirror and fallback), the debts owed to a DebtStore and the
// counters of the decisions its table does not count itself. The seam
// owns it: memStore builds one per policy (lane), and failover uses it.
type lane struct {
	Policy
	lims    []limits.Limit
	maxCost int           // the smallest Burst: the largest cost every limit can pay
	longest time.Duration // the longest full refill (Burst × Interval) of its limits
	table   *bucket.Table
	debts   debtRecord    // what the local fallback charged, owed to a DebtStore
	allowed atomic.Uint64 // decisions of a remote store or of FailOpen/FailClosed
	limited atomic.Uint64
	// limitedBy counts the remote store's denials by the limit that denied
	// (the tightest: see store.Result).
	limitedBy [maxLimits]atomic.Uint64
	// slots are the in-flight slots (InFlight > 0), or FailLocal's.
	slots *slotTable
	// inFlightLimited counts the in-flight limit's refusals, and
	// inFlightOverAllowed those of them that the rate limits had allowed
	// (and counted so: Stats moves them to Limited).
	inFlightLimited, inFlightOverAllowed atomic.Uint64
	// next is the lane that took over this one's buckets when SetPolicies
	// changed the policy's limits (see bucket.Table.Successor).
	next atomic.Pointer[lane]
}

// holding returns the lane, ln or one that took over from it, whose table
// is t: the table that answered a call made on ln's table.
func (ln *lane) holding(t *bucket.Table) *lane {
	for ln.table != t {
		ln = ln.next.Load()
	}
	return ln
}

// tau is the policy's longest full refill time in ns: after it, every
// bucket of a key that was not charged is full.
func (ps *lane) tau() int64 { return int64(ps.longest) }

// memStore is the in-memory store: one bucket.Table per policy. The zero
// value is not ready; use newMemStore.
type memStore struct {
	seed    maphash.Seed
	epoch   time.Time
	clock   func() time.Time // WithClock's; nil: time.Since, the default path
	maxKeys int

	mu    sync.Mutex
	lanes map[string]*lane // by policyID: the Limiter's policies, and those its Store methods meet
}

func newMemStore(maxKeys int) *memStore {
	return &memStore{seed: maphash.MakeSeed(), epoch: time.Now(), maxKeys: maxKeys, lanes: map[string]*lane{}}
}

// now is the store's clock: nanoseconds since it was made, read from
// WithClock's clock if one was given. A reading earlier than one a table
// shard has seen counts as that one (bucket.Table keeps each shard's latest
// time), so a clock that goes back never refills a bucket.
func (m *memStore) now() int64 {
	if m.clock != nil {
		return int64(m.clock().Sub(m.epoch))
	}
	return int64(time.Since(m.epoch))
}

// lane returns the state of policy p, with an empty table if p is new.
// Policies reach it validated: by New, or by the Store contract.
func (m *memStore) lane(p Policy) *lane {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := policyID(p)
	ps := m.lanes[id]
	if ps == nil {
		ps = newLane(p, m.newTable(p))
		if p.InFlight > 0 {
			ps.slots = newSlotTable(p.InFlight, m.maxKeys)
		}
		m.lanes[id] = ps
	}
	return ps
}

// bucketPolicies is p's limits as the bucket package's policies.
func bucketPolicies(p Policy) []bucket.Policy {
	var bps []bucket.Policy
	for _, lim := range p.Limits {
		bp, err := bucket.NewPolicy(lim.Burst, lim.Interval)
		if err != nil {
			panic("addrlimit: " + err.Error()) // the caller broke the Store contract
		}
		bps = append(bps, bp)
	}
	return bps
}

// newTable is an empty table of p's buckets; nil if p has no rate limit.
func (m *memStore) newTable(p Policy) *bucket.Table {
	if len(p.Limits) == 0 {
		return nil
	}
	bps := bucketPolicies(p)
	return bucket.NewTable(bps[0], m.maxKeys, bps[1:]...)
}

// newLane is the lane of policy p with table t. A policy without rate
// limits (an in-flight limit alone) has no table, a maxCost of 0, so that
// charge's test of the cost sends each of its calls off the rate path
// (chargeSlot) without a test of its own, and one zero limit in lims, so
// that the header state's read of lims[tight] needs none either (its
// header Writer sets no quota field: none reads it).
func newLane(p Policy, t *bucket.Table) *lane {
	ln := &lane{Policy: named(p), table: t}
	if len(p.Limits) == 0 {
		ln.lims = []limits.Limit{{}}
		return ln
	}
	ln.maxCost = p.Limits[0].Burst
	for _, lim := range p.Limits {
		l := limits.Limit{Burst: lim.Burst, Interval: lim.Interval}
		ln.lims = append(ln.lims, l)
		ln.maxCost = min(ln.maxCost, lim.Burst)
		ln.longest = max(ln.longest, l.Tau())
	}
	return ln
}

// successor returns the lane of policy p, whose table takes over prev's
// buckets, limit j those of prev's limit from[j] (see
// bucket.Table.Successor), in place of prev among the lanes; its in-flight
// slots are prev's, under p's limit. Without rate limits on either side,
// there are no buckets to take over: p's table is new (nil if p has no
// rate limit), and a stale call on prev's table is answered there. The
// caller links prev to it (prev.next) once the Limiter's side is ready.
func (m *memStore) successor(prev *lane, p Policy, from []int) *lane {
	var t *bucket.Table
	fresh := prev.table == nil || len(p.Limits) == 0
	if fresh {
		t = m.newTable(p)
	} else {
		bps := bucketPolicies(p)
		t = prev.table.Successor(from, bps[0], bps[1:]...)
	}
	ln := newLane(p, t)
	// Each count is read after those that a decision increments after it
	// (hold: inFlightOverAllowed, then inFlightLimited; an allowed
	// decision is counted before either), so that the copies stay
	// consistent while calls run: InFlightLimited never exceeds Limited,
	// nor inFlightOverAllowed Allowed.
	ln.inFlightLimited.Store(prev.inFlightLimited.Load())
	ln.inFlightOverAllowed.Store(prev.inFlightOverAllowed.Load())
	ln.allowed.Store(prev.allowed.Load())
	ln.limited.Store(prev.limited.Load())
	if fresh && prev.table != nil {
		// p has no rate limit: prev's table goes, its counts stay.
		ts := prev.table.Stats()
		ln.allowed.Add(ts.Allowed)
		ln.limited.Add(ts.Limited)
	}
	// The slots held go on: the new limit applies to the next acquire.
	switch {
	case p.InFlight > 0 && prev.slots != nil:
		ln.slots = prev.slots
		ln.slots.setLimit(p.InFlight)
	case p.InFlight > 0:
		ln.slots = newSlotTable(p.InFlight, m.maxKeys)
	}
	for j, f := range from {
		if f >= 0 {
			ln.limitedBy[j].Store(prev.limitedBy[f].Load())
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lanes[policyID(prev.Policy)] == prev {
		delete(m.lanes, policyID(prev.Policy))
	}
	m.lanes[policyID(p)] = ln
	return ln
}

// drop forgets ln, the lane of a policy SetPolicies removed or replaced.
func (m *memStore) drop(ln *lane) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lanes[policyID(ln.Policy)] == ln {
		delete(m.lanes, policyID(ln.Policy))
	}
}

func (m *memStore) keys() keyer { return keyer{seed: m.seed} }

// taken is the answer of ps's table to a Take of n tokens: allowed, and
// the buckets' states f after it.
func (ps *lane) taken(allowed bool, n int, f *bucket.Fulls) (a answer) {
	a.Resets = [maxLimits]time.Duration(*f) // bucket.MaxLimits == MaxLimits
	ps.summarizeTake(allowed, n, &a)
	return a
}

// summarizeTake completes a, an answer to a Take of n tokens whose Resets
// are set: allowed, and the fields that follow from Resets.
func (ps *lane) summarizeTake(allowed bool, n int, a *answer) {
	a.Allowed = allowed
	a.tight = ps.summarize(&a.Result, needAfter(allowed, n))
}

// needAfter is what a call needed of the buckets, for what they report
// after it: n tokens if it was denied, else one more for the next call.
func needAfter(allowed bool, n int) int {
	if allowed {
		return 1
	}
	return n
}

// summarize sets the Remaining, RetryAfter and ResetAfter of res from its
// Resets, after a call that needed need tokens (store.Policy.Result's
// rule), and returns the index of the tightest limit.
func (ps *lane) summarize(res *store.Result, need int) (tight int) {
	tight, res.Remaining, res.RetryAfter, res.ResetAfter = limits.Summarize(ps.lims, need, &res.Resets)
	return tight
}

// tightestOf is the index of the tightest limit of res, a Result of a
// call that needed need tokens (see store.Result).
func (ps *lane) tightestOf(res *store.Result, need int) int {
	return limits.Tightest(ps.lims, need, &res.Resets)
}

// peeked is the answer of ps's table to a Peek or a Refund: buckets in the
// states f, allowed if each holds a whole token.
func (ps *lane) peeked(f bucket.Fulls) answer {
	a := ps.taken(true, 1, &f)
	a.Allowed = a.Remaining > 0
	return a
}

// take answers by the lane whose table decided (see answer.lane).
func (m *memStore) take(_ context.Context, ln *lane, k bucketKey, n int) (a answer) {
	m.takeTo(ln, k, n, &a)
	return a
}

// takeTo is take answering into *a, a zero answer of the caller's, for
// charge to call directly: an answer returned through the seam's interface
// is copied twice, and each copy of a struct just written stalls on store
// forwarding (BenchmarkAllowedOptions).
func (m *memStore) takeTo(ln *lane, k bucketKey, n int, a *answer) {
	allowed, tight, t := ln.table.TakeTo(k.hash, m.now(), int64(n), (*bucket.Fulls)(&a.Resets))
	if t != ln.table {
		ln = ln.holding(t)
	}
	// The table found the tightest limit (limits.Tightest's rule) as it
	// decided.
	a.Allowed, a.tight = allowed, tight
	a.Remaining, a.RetryAfter, a.ResetAfter = limits.Report(ln.lims, tight, needAfter(allowed, n), &a.Resets)
	a.lane = ln
}

// tablePeek is the answer of ln's table to a Peek or Refund that returned
// f, t: by the lane whose table t is.
func (ln *lane) tablePeek(f bucket.Fulls, t *bucket.Table) answer {
	ln = ln.holding(t)
	a := ln.peeked(f)
	a.lane = ln
	return a
}

func (m *memStore) peek(_ context.Context, ln *lane, k bucketKey) answer {
	return ln.tablePeek(ln.table.Peek(k.hash, m.now()))
}

func (m *memStore) refund(_ context.Context, ln *lane, k bucketKey, n int, _ bool) (store.Result, bool, error) {
	return ln.tablePeek(ln.table.Refund(k.hash, m.now(), int64(n))).Result, true, nil
}

func (m *memStore) reset(_ context.Context, ps *lane, k bucketKey) error {
	ps.table.Reset(k.hash, m.now())
	return nil
}
