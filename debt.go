package addrlimit

import (
	"context"
	"sync"
	"sync/atomic"
)

// DebtStore is a Store that can be told what a Limiter spent without it.
// Under FailLocal, the tokens that an instance's local fallback charges
// while the store fails are a debt of that key; the Limiter pays it with the
// key's next Take that reaches the store, so that the shared bucket learns
// what every instance spent in the meantime. Without it, a store that fails
// and answers in turn (a flapping network, a failover) lets each instance
// spend on its own what the store never hears of (README "Many instances"
// gives the figures).
//
// The redisstore module implements it. storetest checks it for stores that
// implement it.
type DebtStore interface {
	Store
	// TakeWithDebt charges debt tokens to key's bucket under p whether or
	// not it holds them, then does what Take(ctx, key, p, n) does, in one
	// atomic step; debt 0 is Take. A debt may leave the bucket below empty,
	// by at most Burst tokens: its ResetAfter is then up to twice
	// Burst × Interval and Remaining is 0. A bucket full since the debt
	// was incurred still pays it: the Limiter forgets debts older than one
	// full refill (Burst × Interval) instead. The Limiter passes
	// 0 <= debt <= 2 × p.Burst. After an error the Limiter keeps the debt
	// for a later Take: a store that charged it and then failed (a timeout
	// after Redis ran the call) has then been charged twice, which limits
	// more, never less.
	TakeWithDebt(ctx context.Context, key string, p Policy, n, debt int) (Result, error)
}

// Bounds of a policy's debt record: at most maxDebtKeys keys, each of at
// most maxDebtKeyLen bytes, so at most about 5 MB per policy however many
// addresses spend during an outage. A key beyond either bound is not
// recorded: its debt is forgiven, as it was before debts existed.
const (
	maxDebtKeys   = 1 << 14
	maxDebtKeyLen = 256
)

// debtRecord is a policy's debts: per key, the tokens the local fallback
// charged while the store failed and that the store has not been told of.
// The zero value is empty and ready. Safe for concurrent use.
type debtRecord struct {
	n atomic.Int32 // entries: the path of a healthy store reads only this

	mu        sync.Mutex
	m         map[string]debt
	nextSweep int64 // a full record looks for expired debts at most once per refill time
}

type debt struct {
	tokens int
	at     int64 // limiter time (ns since its epoch) of the latest charge
}

// add records n more tokens of debt for key, charged at at (now, or the
// time of a debt given back after a failed payment, which keeps its age).
// tau is the policy's full refill time in ns; a key's debt is capped at
// 2 × burst and dated by its latest charge.
func (r *debtRecord) add(key string, n int, at, tau int64, burst int) {
	if len(key) > maxDebtKeyLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok && len(r.m) >= maxDebtKeys {
		if at < r.nextSweep {
			return
		}
		r.nextSweep = at + tau
		for k, e := range r.m {
			if at-e.at > tau {
				delete(r.m, k)
			}
		}
		r.n.Store(int32(len(r.m)))
		if len(r.m) >= maxDebtKeys {
			return
		}
	}
	if r.m == nil {
		r.m = make(map[string]debt)
	}
	r.m[key] = debt{tokens: min(e.tokens+n, 2*burst), at: max(e.at, at)}
	r.n.Store(int32(len(r.m)))
}

// take removes key's debt and returns it with the time of its latest
// charge: 0 tokens if there is none, or if that charge is more than tau old
// (the store's bucket has refilled since).
func (r *debtRecord) take(key string, now, tau int64) (tokens int, at int64) {
	if r.n.Load() == 0 {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return 0, 0
	}
	delete(r.m, key)
	r.n.Store(int32(len(r.m)))
	if now-e.at > tau {
		return 0, 0
	}
	return e.tokens, e.at
}

// cancel removes up to n tokens of key's debt: a refund of what the local
// fallback charged, or a Reset (n < 0: all of it).
func (r *debtRecord) cancel(key string, n int) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	switch {
	case !ok:
	case n < 0 || e.tokens <= n:
		delete(r.m, key)
		r.n.Store(int32(len(r.m)))
	default:
		e.tokens -= n
		r.m[key] = e
	}
}
