package addrlimit

import (
	"sync"
	"sync/atomic"
)

// Bounds of a policy's debt record: at most maxDebtKeys keys, each of at
// most maxDebtKeyLen bytes, so at most about 6.5 MB per policy (2.6 MB with
// IPv4 keys; measured) however many addresses spend during an outage. A key
// longer than that is not recorded: its debt is forgiven, as it was before
// debts existed.
const (
	maxDebtKeys   = 1 << 14
	maxDebtKeyLen = 256
)

// debtRecord is a policy's debts: per key, the tokens the local fallback
// charged while the store failed and that the store has not been told of.
// The zero value is empty and ready. Safe for concurrent use; each operation
// costs O(log maxDebtKeys).
//
// A full record makes room for a new key by forgetting a debt: one older
// than a full refill if there is one (the store's bucket has refilled since,
// so it is worth nothing), else the one of least weight, the oldest of
// equals. A key's weight is its debt plus the weight of the entry whose
// place it took (the Space-Saving rule of Metwally, Agrawal and El Abbadi,
// 2005). So a new key always gets a place, and its debt grows with each
// charge: a flood of other keys cannot keep a spending client out by filling
// the record first. And a debt is forgotten only when all the other entries
// weigh at least as much; the weights sum to at most the tokens recorded
// since the record was last empty, so forgetting a debt of d tokens takes
// at least (maxDebtKeys − 1) × d tokens charged to other entries since then
// (4.9 million one-token requests for a debt of 300). The record keeps the
// largest debts. A debt keeps its place while it is paid: a payment that
// fails leaves it as it was (take, settle).
type debtRecord struct {
	n atomic.Int32 // entries: the path of a healthy store reads only this

	mu             sync.Mutex
	m              map[string]*debtEntry
	heap           []*debtEntry // a min-heap by weight, then age: heap[0] goes first
	oldest, newest *debtEntry   // the entries by latest charge
}

type debtEntry struct {
	key       string
	tokens    int   // owed, including those being paid
	paying    int   // tokens of the payments in flight
	inherited int   // the weight of the entry whose place it took
	at        int64 // limiter time (ns since its epoch) of the latest charge
	i         int   // index in heap; -1 once the entry has left the record
	older     *debtEntry
	newer     *debtEntry
}

func (e *debtEntry) weight() int { return e.inherited + e.tokens }

// add records n more tokens of debt for key, charged at now. tau is the
// policy's full refill time in ns; a key's debt is capped at 2 × burst and
// dated by its latest charge (never before the latest charge of another
// key, so that the record's order by age is exact).
func (r *debtRecord) add(key string, n int, now, tau int64, burst int) {
	if len(key) > maxDebtKeyLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now, tau, 2)
	e := r.m[key]
	if e == nil {
		e = &debtEntry{key: key}
		if len(r.m) >= maxDebtKeys && r.expire(now, tau, 1) == 0 {
			least := r.heap[0]
			e.inherited = least.weight()
			r.remove(least)
		}
		if r.m == nil {
			r.m = make(map[string]*debtEntry)
		}
		r.m[key] = e
		e.i = len(r.heap)
		r.heap = append(r.heap, e)
		r.n.Store(int32(len(r.m)))
	} else {
		r.unlink(e)
	}
	e.tokens = min(e.tokens+n, 2*burst)
	if r.newest != nil {
		now = max(now, r.newest.at)
	}
	e.at = max(e.at, now)
	e.older, r.newest = r.newest, e
	if e.older != nil {
		e.older.newer = e
	} else {
		r.oldest = e
	}
	r.fix(e.i)
}

// take returns the tokens of key's debt that no payment in flight covers,
// and marks them as being paid: the caller pays them and then calls settle
// with the entry and the tokens, whatever happened. It returns 0 if there
// are none, or if the debt's latest charge is more than tau old (the store's
// bucket has refilled since: the debt is forgiven).
func (r *debtRecord) take(key string, now, tau int64) (*debtEntry, int) {
	if r.n.Load() == 0 {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now, tau, 2)
	e := r.m[key]
	if e == nil || e.tokens <= e.paying {
		return nil, 0
	}
	if now-e.at > tau {
		if e.paying == 0 {
			r.remove(e)
		}
		return nil, 0
	}
	owed := e.tokens - e.paying
	e.paying = e.tokens
	return e, owed
}

// settle ends a payment of owed tokens of e's debt that take started: paid,
// the debt shrinks by them; otherwise it stays as it was, in its place, to
// be paid by a later take. A debt that left the record meanwhile (a Reset,
// or forgotten to make room) is not put back.
func (r *debtRecord) settle(e *debtEntry, owed int, paid bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.i < 0 {
		return
	}
	e.paying = max(0, e.paying-owed)
	if !paid {
		return
	}
	e.tokens -= owed
	if e.tokens <= 0 {
		r.remove(e)
		return
	}
	r.fix(e.i)
}

// cancel removes up to n tokens of key's debt: a refund of what the local
// fallback charged, or a Reset (n < 0: all of it).
func (r *debtRecord) cancel(key string, n int) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	switch {
	case e == nil:
	case n < 0 || e.tokens <= n:
		r.remove(e)
	default:
		e.tokens -= n
		r.fix(e.i)
	}
}

// expire forgets up to limit debts whose latest charge is more than tau old,
// the oldest first, and returns how many it forgot. Called with r.mu held.
func (r *debtRecord) expire(now, tau int64, limit int) int {
	done := 0
	for ; done < limit && r.oldest != nil && now-r.oldest.at > tau; done++ {
		r.remove(r.oldest)
	}
	return done
}

// remove takes e out of the record. Called with r.mu held.
func (r *debtRecord) remove(e *debtEntry) {
	last := len(r.heap) - 1
	i := e.i
	if i != last {
		r.heap[i] = r.heap[last]
		r.heap[i].i = i
	}
	r.heap[last] = nil
	r.heap = r.heap[:last]
	if i != last {
		r.fix(i)
	}
	r.unlink(e)
	e.i = -1
	delete(r.m, e.key)
	r.n.Store(int32(len(r.m)))
}

// unlink takes e out of the order by age. Called with r.mu held.
func (r *debtRecord) unlink(e *debtEntry) {
	if e.older != nil {
		e.older.newer = e.newer
	} else if r.oldest == e {
		r.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else if r.newest == e {
		r.newest = e.older
	}
	e.older, e.newer = nil, nil
}

// goesFirst reports whether a is forgotten before b to make room: it weighs
// less, or as much and was charged earlier.
func goesFirst(a, b *debtEntry) bool {
	wa, wb := a.weight(), b.weight()
	return wa < wb || wa == wb && a.at < b.at
}

// fix restores the heap's order after the entry at i changed. Called with
// r.mu held.
func (r *debtRecord) fix(i int) {
	h := r.heap
	for i > 0 {
		p := (i - 1) / 2
		if !goesFirst(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].i, h[p].i = i, p
		i = p
	}
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && goesFirst(h[c+1], h[c]) {
			c++
		}
		if !goesFirst(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		h[i].i, h[c].i = i, c
		i = c
	}
}
