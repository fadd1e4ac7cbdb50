package bucket

import (
	"math"
	"math/bits"
)

// inheritance is how a table made by Successor takes over its
// predecessor's buckets.
type inheritance struct {
	// from[j] is the predecessor's limit whose buckets limit j inherits,
	// or -1: limit j's buckets start full.
	from [MaxLimits]int
	old  [MaxLimits]Policy // the predecessor's limits
}

// Successor returns a table of policy and more (as NewTable, with t's
// maxKeys) that takes over t's buckets: its limit j (0 for policy, then
// more) inherits the buckets of t's limit from[j], or, for from[j] == -1
// (or j past from), starts with full buckets; t's limits that no entry
// names are dropped. A bucket keeps the tokens it has spent, counted in the
// inheriting limit's tokens, at most that limit's burst (an empty bucket
// stays empty however its burst changes) and, in debt beyond empty (see
// Mirror), at most twice its refill time. So a client that spent 250 of
// 300 has spent 250 of 400 after the limit grows to 400, and all 100 of
// 100 after it shrinks; under a longer refill interval its tokens come
// back more slowly from the reconfiguration on. Spent fractions of a token
// are rounded up, and the approximate memory is carried over by the same
// rule, so a successor never holds a key fuller than t did.
//
// The buckets move a shard at a time, when a call first locks the
// successor's shard (Settle moves the rest), at the latest time either
// shard has seen; from then on every call on t for that shard is served by
// the successor (Take, Peek and Refund report it), so no charge is lost
// whether a caller holds t or its successor. Counters move with the
// buckets, a limit's denials with its buckets. A table has at most one
// successor: Successor panics on the second call, as on a bad from.
func (t *Table) Successor(from []int, policy Policy, more ...Policy) *Table {
	if len(from) > 1+len(more) {
		panic("bucket: Successor given more inheritances than limits")
	}
	n := NewTable(policy, t.maxKeys, more...)
	n.prev = t
	for j := range n.inherit.from {
		n.inherit.from[j] = -1
		if j < len(from) {
			if from[j] < -1 || from[j] >= t.n {
				panic("bucket: Successor given a limit the table does not have")
			}
			n.inherit.from[j] = from[j]
		}
	}
	n.inherit.old = t.all
	for i := range n.shards {
		n.shards[i].moved = pending
	}
	if !t.next.CompareAndSwap(nil, n) {
		panic("bucket: a table has one successor")
	}
	return n
}

// Settle moves every shard that the successor t has not inherited yet (see
// Successor) and lets go of its predecessor. It locks each shard in turn.
func (t *Table) Settle(now int64) {
	if t.prev == nil {
		return
	}
	for i := range t.shards {
		t.lockShard(i, now).mu.Unlock()
	}
	// Every shard has moved: no call reads prev any more (lockShard reads
	// it only for a pending shard, under that shard's lock).
	t.prev = nil
}

// lockShard locks shard i, first moving its predecessor's buckets into it
// if it has not inherited them yet.
func (t *Table) lockShard(i int, now int64) *shard {
	s := &t.shards[i]
	s.mu.Lock()
	if s.moved == pending {
		t.move(i, s, now)
	}
	return s
}

// The states of a shard's moved.
const (
	pending = 1 + iota
	retired
)

// move gives the locked shard i, s, its predecessor's buckets at now (or
// the later time either shard has seen) and retires the predecessor's
// shard. Locks are taken from the newest table to the oldest.
func (t *Table) move(i int, s *shard, now int64) {
	p := t.prev.lockShard(i, now)
	now = max(now, p.now, s.now)
	s.now = now
	for j := range t.n {
		f := t.inherit.from[j]
		if f < 0 {
			continue
		}
		if sk := *p.sketchOf(f); sk != nil {
			*s.sketchOf(j) = t.carrySketch(j, f, sk, int(s.max), now)
		}
	}
	for k, sl := range p.ex.slots {
		if sl.h == 0 {
			continue
		}
		var old [MaxLimits]int64
		p.ex.states(k, &old)
		tats := t.inherited(&old, now)
		h := sl.key()
		s.set(t, h, &tats, now, false)
		if sl.isPinned() {
			s.ex.pin(h, true)
		}
	}
	s.allowed += p.allowed
	s.limited += p.limited
	s.evictions += p.evictions
	if m := s.ex.more; m != nil {
		for j := range t.n {
			if f := t.inherit.from[j]; f >= 0 {
				m.limited[j] += p.limitedBy(f)
			}
		}
	}
	p.ex, p.sk, p.moved = exact{}, nil, retired
	p.mu.Unlock()
	s.moved = 0
}

// limitedBy is the shard's count of denials by its limit j.
func (s *shard) limitedBy(j int) uint64 {
	if s.ex.more == nil {
		return s.limited
	}
	return s.ex.more.limited[j]
}

// inherited returns the states of t's limits for a key whose states under
// t's predecessor's limits were old, at now (see Successor).
func (t *Table) inherited(old *[MaxLimits]int64, now int64) (tats [MaxLimits]int64) {
	for j := range t.n {
		if f := t.inherit.from[j]; f >= 0 {
			tats[j] = carry(t.inherit.old[f], t.all[j], old[f], now)
		}
	}
	return tats
}

// inheritedFulls is inherited for the states f of the predecessor's limits,
// given as times until full.
func (t *Table) inheritedFulls(f Fulls, now int64) Fulls {
	var old [MaxLimits]int64
	for j, d := range f {
		old[j] = now + int64(d)
	}
	tats := t.inherited(&old, now)
	return t.fulls(&tats, now)
}

// carry is the state under limit pn at now of a bucket in state tat under
// limit po: the same tokens spent (rounded up to a nanosecond of pn's
// time), at most pn's burst, or twice it for a bucket in debt beyond empty.
func carry(po, pn Policy, tat, now int64) int64 {
	d := tat - now
	if d <= 0 {
		return tat // full
	}
	limit := pn.tau
	if d > po.tau {
		limit = 2 * pn.tau
	}
	if po.interval == pn.interval {
		return now + min(d, limit)
	}
	hi, lo := bits.Mul64(uint64(d), uint64(pn.interval))
	if hi >= uint64(po.interval) {
		return now + limit // beyond int64: beyond any limit
	}
	q, r := bits.Div64(hi, lo, uint64(po.interval))
	if r != 0 {
		q++
	}
	if q > uint64(limit) {
		return now + limit
	}
	return now + int64(q)
}

// carrySketch returns the approximate memory of t's limit j made from sk,
// that of the predecessor's limit f, at now: each live cell carried over
// by carry, so that a key's estimate is never fuller than it was. An
// unchanged limit keeps sk itself.
func (t *Table) carrySketch(j, f int, sk *sketch, shardCap int, now int64) *sketch {
	po, pn := t.inherit.old[f], t.all[j]
	if po == pn {
		return sk
	}
	oc, nc := newSketchClock(po.tau), newSketchClock(pn.tau)
	out := newSketch(nc, shardCap, now)
	nuOld, nuNew := floorDiv(now, oc.unit), floorDiv(now, nc.unit)
	if nuOld >= sk.maxTAT || len(out.cells) != len(sk.cells) {
		return out // nothing live (the widths match: same capacity)
	}
	for i := range sk.cells {
		tu, ok := sk.cell(oc, i, nuOld)
		if !ok || tu*oc.unit <= now {
			continue
		}
		// At most now + tau, as merge keeps it: a later cell would read free.
		tat := min(carry(po, pn, min(tu*oc.unit, math.MaxInt64/2), now), now+pn.tau)
		nu := ceilDiv(tat, nc.unit)
		if uint8(nu) == 0 {
			nu++
		}
		out.raise(nc, i/int(sk.width), i, nu, nuNew)
	}
	return out
}
