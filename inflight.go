package addrlimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// MaxInFlight bounds Policy.InFlight.
const MaxInFlight = 1 << 20

// WithInFlight bounds how many of a key's requests may run at once under
// the default policy: n slots per key (per client address by default), each
// held from the decision until the request's handler returns, beside the
// rate limits. Give named policies their own with Policy.InFlight (a smaller
// one for streaming routes, picked by a PolicySelector). n must be 0 (no
// in-flight limit, the default) to MaxInFlight.
//
// A request must pass both limits, rate first: a request the rate limits
// deny takes no slot, and one refused a slot gets its tokens back, so a
// refused request holds nothing and is charged nothing. Handler refuses it
// with 429 Too Many Requests and Retry-After: 1 (no clock says when a
// running request ends, so the shortest delay RFC 9110 allows; a retry
// that finds the slots still held costs nothing and is refused again);
// Decision.InFlightLimited is set and Decision.RetryAfter is one second.
// Exempt requests hold no slot. Allow, Decide and AllowKey callers release
// the slot with Limiter.Release.
//
// Slots are counted per policy and key in this process's memory: at most
// WithMaxKeys keys per policy, and a key with slots held is never evicted:
// past the bound, a key that holds none is refused. Keys whose requests
// all ended are swept, so the table stays below about twice the keys
// holding slots plus 1,024. Or slots are counted for a whole fleet by a
// Store given to WithStore that implements InFlightStore: a slot is then a
// lease, renewed every LeaseTime/3 while its request runs and released
// when it ends (a failed release is retried twice, at the next renewals,
// then left to lapse). When the store fails to take a slot, the failure
// policy decides: FailLocal limits with a local table of the same size (so
// each instance admits up to n per key during the outage), FailOpen lets
// the request run holding nothing, FailClosed refuses it (503).
func WithInFlight(n int) Option {
	return func(c *config) error {
		if n < 0 || n > MaxInFlight {
			return fmt.Errorf("addrlimit: in-flight limit must be 0 (none) to %d, got %d", MaxInFlight, n)
		}
		c.inFlight = n
		return nil
	}
}

// slot is an in-flight slot a decision holds: the zero slot holds none.
type slot struct {
	ps  *policyState // nil: no slot held
	cnt *slotCount   // the key's count in ps.slots, for a slot of the table
	// lease is the slot's lease in a fleet store (InFlightStore); nil: a
	// slot of ps.slots.
	lease *Lease
}

// heldSlot is the slot of a Decision that Allow, Decide or AllowKey
// returned, released at most once whatever copies of the Decision exist.
type heldSlot struct {
	slot
	released atomic.Bool
}

// slotAnswer is a seam's answer to acquire.
type slotAnswer struct {
	held    int   // the key's slots held: after the call, or that refused it
	ok      bool  // a slot was taken (or FailOpen let the request run without one)
	err     error // the store failed and the failure policy decided
	unknown bool  // FailClosed refused: nothing is known of the key's slots
}

// hold takes an in-flight slot into s for the request d that the rate
// limits of ps let run (Allowed, or a dry run). A refusal makes d Limited
// with InFlightLimited set and gives back the tokens it was charged.
func (l *Limiter) hold(ctx context.Context, ps *policyState, k bucketKey, s *slot, d *Decision) {
	rateDegraded := d.Degraded
	var a slotAnswer
	*s, a = l.store.acquire(ctx, ps, k)
	if !a.ok && a.err == nil && l.waitQueue > 0 && !l.dryRun {
		*s, a = l.await(ctx, ps, k, a)
	}
	d.InFlight = a.held
	if a.err != nil {
		l.storeErrors.Add(1)
		d.Degraded, d.Err = true, join(d.Err, a.err)
	}
	if a.ok {
		return
	}
	ps.inFlightLimited.Add(1)
	if d.Outcome == Allowed {
		ps.inFlightOverAllowed.Add(1)
		res, ok, err := l.store.refund(context.WithoutCancel(ctx), ps, k, d.Cost, rateDegraded)
		if err != nil {
			l.storeErrors.Add(1)
			d.Err = join(d.Err, err)
		}
		if ok && err == nil && !d.QuotaUnknown {
			res = ps.fill(res)
			d.Remaining, d.ResetAfter, d.resets = res.Remaining, res.ResetAfter, res.Resets
			d.tight = uint8(ps.tightestOf(&res, 1))
		}
	}
	if a.unknown {
		d.record(ps, &answer{unknown: true})
	}
	d.Outcome, d.InFlightLimited, d.RetryAfter, d.DryRun = Limited, true, time.Second, l.dryRun
}

// Release frees the in-flight slot that a decision d of this Limiter's
// Allow, Decide or AllowKey holds (Decision.HoldsSlot), when the work it
// allowed is done: call it with defer once the decision is allowed, so that
// a panic or an early return frees the slot too. Handler releases its own.
// Each slot is freed once: further calls with d or a copy of it do
// nothing, as do calls with a decision that holds no slot. ctx bounds a
// fleet store's call; its cancellation is ignored.
func (l *Limiter) Release(ctx context.Context, d Decision) {
	l.mustBeBuilt()
	h := d.slot
	if h == nil || l.byName[d.Policy] != h.ps || !h.released.CompareAndSwap(false, true) {
		return
	}
	l.free(ctx, h.slot)
}

// free releases the slot s where it was taken; a fleet store's failure is
// counted (the seam retries or lets the lease lapse). The seam ignores
// ctx's cancellation (the memory table has no use for ctx at all, so it is
// not wrapped here: that would cost an allocation per request).
func (l *Limiter) free(ctx context.Context, s slot) {
	if err := l.store.release(ctx, s); err != nil {
		l.storeErrors.Add(1)
	}
}

// keep makes the slot s, if it holds one, d's to release (Release).
func (d *Decision) keep(s slot) {
	if s.ps != nil {
		d.slot = &heldSlot{slot: s}
	}
}

// HoldsSlot reports whether d holds an in-flight slot that Limiter.Release
// must free: an allowed (or dry-run) decision of Allow, Decide or AllowKey
// under a policy with an in-flight limit. It stays true after the release.
func (d Decision) HoldsSlot() bool { return d.slot != nil }

// await waits for a slot of k under ps that acquire refused (a), as
// WithInFlightWait allows: until a slot is released (in this process), the
// wait's timeout, at which it tries once more, or the end of ctx (the
// request's: a client that goes away stops waiting). A waiting request
// holds no slot; it is counted in PolicyStats.InFlightWaiting.
func (l *Limiter) await(ctx context.Context, ps *policyState, k bucketKey, a slotAnswer) (slot, slotAnswer) {
	timer := time.NewTimer(l.waitTimeout)
	defer timer.Stop()
	for {
		wake, ok := ps.slots.enqueue(k.hash, l.waitQueue)
		if !ok {
			return slot{}, a
		}
		s, b := l.store.acquire(ctx, ps, k) // after enqueue: no release is missed
		if b.ok || b.err != nil {
			ps.slots.dequeue(k.hash)
			return s, b
		}
		a = b
		var done bool
		select {
		case <-wake:
		case <-timer.C:
			done = true
		case <-ctx.Done():
			ps.slots.dequeue(k.hash)
			return slot{}, a
		}
		ps.slots.dequeue(k.hash)
		if done {
			return l.store.acquire(ctx, ps, k)
		}
	}
}

// WithInFlightWait lets a request that finds every in-flight slot of its
// key held (WithInFlight, Policy.InFlight) wait for one, up to timeout,
// instead of being refused at once: at most queue requests per key and
// policy wait, the others are refused at once. A waiting request holds no
// slot, keeps the tokens it was charged (given back if it is refused in the
// end) and is counted in PolicyStats.InFlightWaiting; it takes the first
// slot a request of this process releases (with a fleet store, another
// instance's release is seen at the next try: once more at the timeout),
// and stops waiting when its own context ends (the client went away). Not
// in a dry run, which never refuses. queue must be at least 1 and timeout
// positive.
func WithInFlightWait(queue int, timeout time.Duration) Option {
	return func(c *config) error {
		if queue < 1 || timeout <= 0 {
			return fmt.Errorf("addrlimit: WithInFlightWait needs a queue of at least 1 and a positive timeout, got %d and %v", queue, timeout)
		}
		c.waitQueue, c.waitTimeout = queue, timeout
		return nil
	}
}

func (m *memStore) acquire(_ context.Context, ps *policyState, k bucketKey) (slot, slotAnswer) {
	c, n, ok := ps.slots.acquire(k.hash)
	if !ok {
		return slot{}, slotAnswer{held: n}
	}
	return slot{ps: ps, cnt: c}, slotAnswer{held: n, ok: true}
}

func (m *memStore) release(_ context.Context, s slot) error {
	s.ps.slots.release(s.cnt)
	return nil
}
