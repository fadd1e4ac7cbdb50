package addrlimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/store"
)

// WithInFlight bounds how many of a key's requests run at once under the
// default policy (Policy.InFlight for others; 0, the default, is none): a
// slot is held until the handler returns. A request the rate limits deny
// takes none; one refused a slot gets its tokens back and a 429 with
// Retry-After: 1. Exempt requests hold none. Slots live in memory or, with a
// store.InFlightStore, fleet-wide as leases (docs/inflight.md).
func WithInFlight(n int) Option {
	return func(c *config) error {
		if n < 0 || n > store.MaxInFlight {
			return fmt.Errorf("addrlimit: in-flight limit must be 0 (none) to %d, got %d", store.MaxInFlight, n)
		}
		c.inFlight = n
		return nil
	}
}

// slot is an in-flight slot a decision holds: the zero slot holds none.
type slot struct {
	ln  *lane      // nil: no slot held
	cnt *slotCount // the key's count in ln.slots, for a slot of the table
	// lease is the slot's lease in a fleet store (store.InFlightStore);
	// nil: a slot of ln.slots.
	lease *store.Lease
}

// heldSlot is the slot of a Decision that Allow, Decide or AllowKey
// returned, released at most once whatever copies of the Decision exist,
// and only by the Limiter that took it.
type heldSlot struct {
	slot
	owner    *Limiter
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
	*s, a = l.store.acquire(ctx, ps.lane, k)
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
	if d.Outcome == Allowed {
		ps.inFlightOverAllowed.Add(1) // before inFlightLimited: see successor
	}
	ps.inFlightLimited.Add(1)
	if d.Outcome == Allowed && len(ps.Limits) > 0 { // else no bucket was charged
		res, ok, err := l.store.refund(ctx, ps.lane, k, d.Cost, rateDegraded) // detached by the seam
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

// Release frees the in-flight slot d holds (Decision.HoldsSlot), once however
// many copies of d exist: defer it once Allow, Decide or AllowKey allowed.
func (l *Limiter) Release(ctx context.Context, d Decision) {
	l.mustBeBuilt()
	h := d.slot
	if h == nil || h.owner != l || !h.released.CompareAndSwap(false, true) {
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
func (l *Limiter) keep(d *Decision, s slot) {
	if s.ln != nil {
		d.slot = &heldSlot{slot: s, owner: l}
	}
}

// HoldsSlot reports whether d holds a slot for Limiter.Release to free.
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
		s, b := l.store.acquire(ctx, ps.lane, k) // after enqueue: no release is missed
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
			return l.store.acquire(ctx, ps.lane, k)
		}
	}
}

// WithInFlightWait lets up to queue requests per key and policy wait up to
// timeout (or their context's end) for an in-flight slot instead of a
// refusal, holding none meanwhile (PolicyStats.InFlightWaiting).
func WithInFlightWait(queue int, timeout time.Duration) Option {
	return func(c *config) error {
		if queue < 1 || timeout <= 0 {
			return fmt.Errorf("addrlimit: WithInFlightWait needs a queue of at least 1 and a positive timeout, got %d and %v", queue, timeout)
		}
		c.waitQueue, c.waitTimeout = queue, timeout
		return nil
	}
}

func (m *memStore) acquire(_ context.Context, ln *lane, k bucketKey) (slot, slotAnswer) {
	c, n, ok := ln.slots.acquire(k.hash)
	if !ok {
		return slot{}, slotAnswer{held: n}
	}
	return slot{ln: ln, cnt: c}, slotAnswer{held: n, ok: true}
}

func (m *memStore) release(_ context.Context, s slot) error {
	s.ln.slots.release(s.cnt)
	return nil
}
