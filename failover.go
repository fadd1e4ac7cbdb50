package addrlimit

import (
	"context"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/storehook"
)

func init() {
	storehook.BehindFailLocal = func(s any, maxKeys int) any {
		return newFailover(s.(Store), FailLocal, newMemStore(maxKeys))
	}
}

// failover is a Store given to WithStore behind the Limiter's failure
// policy: every call goes to remote; when remote fails, policy decides. Under
// FailLocal the local tables keep a mirror of what remote last said for each
// key, decide from it while remote fails, and record what they charged as
// the key's debt, paid with its next Take that remote answers (when remote is
// a DebtStore).
type failover struct {
	remote Store
	leases *leases   // remote's in-flight slots, if it is an InFlightStore
	debts  DebtStore // remote, if it is one and policy is FailLocal
	policy FailurePolicy
	local  *memStore // the mirror and fallback buckets, one table per policy
}

func newFailover(remote Store, policy FailurePolicy, local *memStore) *failover {
	f := &failover{remote: remote, policy: policy, local: local}
	if ds, ok := remote.(DebtStore); ok && policy == FailLocal {
		f.debts = ds
	}
	return f
}

// take is remote's Take, decided whatever the caller does: a client that
// hangs up cancels r.Context() and must not get the failure policy for it
// (remote's own timeout bounds the call).
func (f *failover) take(ctx context.Context, ps *policyState, k bucketKey, n int) (a answer) {
	res, err := f.remoteTake(context.WithoutCancel(ctx), ps, k.s, n)
	if err == nil {
		res = ps.fill(res)
		if f.policy == FailLocal {
			ps.table.Mirror(k.hash, f.local.now(), bucket.Fulls(res.Resets))
		}
		need := 1
		if !res.Allowed {
			need = n
		}
		a = answer{Result: res, tight: ps.tightestOf(&res, need)}
		ps.count(&a)
		return a
	}
	switch f.policy {
	case FailOpen:
		a = answer{Result: Result{Allowed: true}, err: err, unknown: true}
		ps.count(&a)
		return a
	case FailClosed:
		a = answer{Result: Result{RetryAfter: time.Second}, err: err, unknown: true}
		ps.count(&a)
		return a
	}
	allowed, _, fulls := ps.table.Take(k.hash, f.local.now(), int64(n)) // counted by the table
	a = ps.taken(allowed, n, &fulls)
	a.err = err
	if allowed && f.debts != nil {
		ps.debts.add(k.s, n, f.local.now(), ps.tau(), ps.maxCost)
	}
	return a
}

// fill fills in res.Resets for a policy of one limit, which a Store may
// leave zero (see Result).
func (ps *policyState) fill(res Result) Result {
	if len(ps.Limits) == 1 {
		res.Resets[0] = res.ResetAfter
	}
	return res
}

// count counts a decision a that no local table took: remote's, or that of
// FailOpen or FailClosed. (A table counts its own; refuseCost counts its
// refusals.) A denial by a limit is counted for that limit too.
func (ps *policyState) count(a *answer) {
	switch {
	case a.Allowed:
		ps.allowed.Add(1)
	case a.unknown:
		ps.limited.Add(1)
	default:
		ps.limited.Add(1)
		ps.limitedBy[a.tight].Add(1)
	}
}

// remoteTake is remote's Take of n tokens for key, paying key's debt with
// it when remote is a DebtStore. A failed call leaves the debt in its place
// in the record, for a later Take.
func (f *failover) remoteTake(ctx context.Context, ps *policyState, key string, n int) (Result, error) {
	if f.debts == nil {
		return f.remote.Take(ctx, key, ps.Policy, n)
	}
	e, owed := ps.debts.take(key, f.local.now(), ps.tau())
	if owed == 0 {
		return f.remote.Take(ctx, key, ps.Policy, n)
	}
	res, err := f.debts.TakeWithDebt(ctx, key, ps.Policy, n, owed)
	ps.debts.settle(e, owed, err == nil)
	return res, err
}

// peek is remote's Peek. Only Limiter.Peek asks, and it reports remote's
// error rather than a local guess.
func (f *failover) peek(ctx context.Context, ps *policyState, k bucketKey) answer {
	res, err := f.remote.Peek(ctx, k.s, ps.Policy)
	res = ps.fill(res)
	return answer{Result: res, tight: ps.tightestOf(&res, 1), err: err}
}

// refund gives n tokens back to the bucket that paid them: remote's, or the
// local one that decided under FailLocal. FailOpen and FailClosed charged
// nothing when they decided, so nothing is refunded.
func (f *failover) refund(ctx context.Context, ps *policyState, k bucketKey, n int, degraded bool) (Result, bool, error) {
	switch {
	case degraded && f.policy == FailLocal:
		ps.debts.cancel(k.s, n)
		return ps.peeked(ps.table.Refund(k.hash, f.local.now(), int64(n))).Result, true, nil
	case degraded:
		return Result{}, false, nil
	}
	res, err := f.remote.Refund(ctx, k.s, ps.Policy, n)
	if err != nil {
		return Result{}, false, err
	}
	res = ps.fill(res)
	if f.policy == FailLocal {
		// The local copy keeps the later of its state and an answer
		// (answers may arrive out of order), so give it the refund
		// first, as remote did.
		now := f.local.now()
		ps.table.Refund(k.hash, now, int64(n))
		ps.table.Mirror(k.hash, now, bucket.Fulls(res.Resets))
	}
	return res, true, nil
}

// reset resets the local bucket and forgets the key's debt whatever remote
// says, then resets remote's bucket.
func (f *failover) reset(ctx context.Context, ps *policyState, k bucketKey) error {
	ps.table.Reset(k.hash, f.local.now())
	ps.debts.cancel(k.s, -1)
	return f.remote.Reset(ctx, k.s, ps.Policy)
}

// acquire takes a slot of k under ps: a lease of remote when it keeps
// slots, under the failure policy (FailLocal: the local table, of the same
// size; FailOpen: no slot, the request runs; FailClosed: refused), else
// the local table (each instance enforces the limit alone). A lease whose
// Acquire failed is never renewed: if the store took it, it lapses.
func (f *failover) acquire(ctx context.Context, ps *policyState, k bucketKey) (slot, slotAnswer) {
	if f.leases == nil {
		return f.local.acquire(ctx, ps, k)
	}
	l := f.leases.newLease(ps.Name, k.s)
	held, ok, err := f.leases.store.Acquire(context.WithoutCancel(ctx), *l, ps.InFlight)
	switch {
	case err == nil && ok:
		f.leases.hold(l)
		return slot{ps: ps, lease: l}, slotAnswer{held: held, ok: true}
	case err == nil:
		return slot{}, slotAnswer{held: held}
	case f.policy == FailOpen:
		return slot{}, slotAnswer{ok: true, err: err}
	case f.policy == FailClosed:
		return slot{}, slotAnswer{err: err, unknown: true}
	}
	s, a := f.local.acquire(ctx, ps, k)
	a.err = err
	return s, a
}

// release frees s where it was taken, whatever ctx's cancellation. A lease is no longer renewed; if its
// Release fails, it is retried at the next renewal ticks (releaseTries in
// all: Release of a lease already freed or lapsed frees nothing else) and
// otherwise lapses.
func (f *failover) release(ctx context.Context, s slot) error {
	if s.lease == nil {
		return f.local.release(ctx, s)
	}
	f.leases.drop(s.lease)
	err := f.leases.store.Release(context.WithoutCancel(ctx), *s.lease)
	s.ps.slots.notify() // this instance's waiting requests try again
	if err != nil {
		f.leases.failed(s.lease)
	}
	return err
}

// The Store methods are the seam's, for storetest: the wrapper is what
// production runs in front of a remote store.

func (f *failover) keys() keyer { return keyer{seed: f.local.seed, strings: true} }

func (f *failover) Take(ctx context.Context, key string, p Policy, n int) (Result, error) {
	a := f.take(ctx, f.local.lane(p), f.local.keys().of(key), n)
	return a.Result, a.err
}

func (f *failover) Refund(ctx context.Context, key string, p Policy, n int) (Result, error) {
	res, _, err := f.refund(ctx, f.local.lane(p), f.local.keys().of(key), n, false)
	return res, err
}

func (f *failover) Peek(ctx context.Context, key string, p Policy) (Result, error) {
	a := f.peek(ctx, f.local.lane(p), f.local.keys().of(key))
	return a.Result, a.err
}

func (f *failover) Reset(ctx context.Context, key string, p Policy) error {
	return f.reset(ctx, f.local.lane(p), f.local.keys().of(key))
}
