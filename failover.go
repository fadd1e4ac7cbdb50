package addrlimit

import (
	"context"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/store"
)

// failover is a Store given to WithStore behind the Limiter's failure
// policy: every call goes to remote; when remote fails, policy decides. Under
// FailLocal the local tables keep a mirror of what remote last said for each
// key, decide from it while remote fails, and record what they charged as
// the key's debt, paid with its next Take that remote answers (when remote is
// a DebtStore).
type failover struct {
	remote store.Store
	leases *leases         // remote's in-flight slots, if it is an InFlightStore
	debts  store.DebtStore // remote, if it is one and policy is FailLocal
	policy FailurePolicy
	local  *memStore // the mirror and fallback buckets, one table per policy
}

func newFailover(remote store.Store, policy FailurePolicy, local *memStore) *failover {
	f := &failover{remote: remote, policy: policy, local: local}
	if ds, ok := remote.(store.DebtStore); ok && policy == FailLocal {
		f.debts = ds
	}
	return f
}

// detach is the context of a call to remote that decides or refunds a
// request: ctx without its cancellation, since a client that hangs up
// cancels r.Context() and must get neither the failure policy nor a lost
// refund for it (remote's own timeout bounds the call). It is the one place
// the Limiter drops a cancellation: the memory tables never read ctx.
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// take is remote's Take, decided whatever the caller does (detach).
func (f *failover) take(ctx context.Context, ps *lane, k bucketKey, n int) (a answer) {
	res, err := f.remoteTake(detach(ctx), ps, k.s, n)
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
		a = answer{Result: store.Result{Allowed: true}, err: err, unknown: true}
		ps.count(&a)
		return a
	case FailClosed:
		a = answer{Result: store.Result{RetryAfter: time.Second}, err: err, unknown: true}
		ps.count(&a)
		return a
	}
	a = f.local.take(ctx, ps, k, n) // counted by the table
	a.err = err
	if ps = a.lane; a.Allowed && f.debts != nil {
		ps.debts.add(k.s, n, f.local.now(), ps.tau(), ps.maxCost)
	}
	return a
}

// fill fills in res.Resets for a policy of one limit, which a Store may
// leave zero (see Result).
func (ps *lane) fill(res store.Result) store.Result {
	if len(ps.Limits) == 1 {
		res.Resets[0] = res.ResetAfter
	}
	return res
}

// count counts a decision a that no local table took: remote's, or that of
// FailOpen or FailClosed. (A table counts its own; refuseCost counts its
// refusals.) A denial by a limit is counted for that limit too.
func (ps *lane) count(a *answer) {
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
func (f *failover) remoteTake(ctx context.Context, ps *lane, key string, n int) (store.Result, error) {
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
func (f *failover) peek(ctx context.Context, ps *lane, k bucketKey) answer {
	res, err := f.remote.Peek(ctx, k.s, ps.Policy)
	res = ps.fill(res)
	return answer{Result: res, tight: ps.tightestOf(&res, 1), err: err}
}

// refund gives n tokens back to the bucket that paid them: remote's, or the
// local one that decided under FailLocal. FailOpen and FailClosed charged
// nothing when they decided, so nothing is refunded.
func (f *failover) refund(ctx context.Context, ps *lane, k bucketKey, n int, degraded bool) (store.Result, bool, error) {
	switch {
	case degraded && f.policy == FailLocal:
		ps.debts.cancel(k.s, n)
		return ps.tablePeek(ps.table.Refund(k.hash, f.local.now(), int64(n))).Result, true, nil
	case degraded:
		return store.Result{}, false, nil
	}
	res, err := f.remote.Refund(detach(ctx), k.s, ps.Policy, n)
	if err != nil {
		return store.Result{}, false, err
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
func (f *failover) reset(ctx context.Context, ps *lane, k bucketKey) error {
	ps.table.Reset(k.hash, f.local.now())
	ps.debts.cancel(k.s, -1)
	return f.remote.Reset(ctx, k.s, ps.Policy)
}

// acquire takes a slot of k under ps: a lease of remote when it keeps
// slots, under the failure policy (FailLocal: the local table, of the same
// size; FailOpen: no slot, the request runs; FailClosed: refused), else
// the local table (each instance enforces the limit alone). A lease whose
// Acquire failed is never renewed: if the store took it, it lapses.
func (f *failover) acquire(ctx context.Context, ln *lane, k bucketKey) (slot, slotAnswer) {
	if f.leases == nil {
		return f.local.acquire(ctx, ln, k)
	}
	l := f.leases.newLease(ln.Name, k.s)
	held, ok, err := f.leases.store.Acquire(detach(ctx), *l, ln.InFlight)
	switch {
	case err == nil && ok:
		f.leases.hold(l)
		return slot{ln: ln, lease: l}, slotAnswer{held: held, ok: true}
	case err == nil:
		return slot{}, slotAnswer{held: held}
	case f.policy == FailOpen:
		return slot{}, slotAnswer{ok: true, err: err}
	case f.policy == FailClosed:
		return slot{}, slotAnswer{err: err, unknown: true}
	}
	s, a := f.local.acquire(ctx, ln, k)
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
	err := f.leases.store.Release(detach(ctx), *s.lease)
	s.ln.slots.notify() // this instance's waiting requests try again
	if err != nil {
		f.leases.failed(s.lease)
	}
	return err
}

func (f *failover) keys() keyer { return keyer{seed: f.local.seed, strings: true} }
