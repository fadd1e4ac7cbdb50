package bucket

import (
	"math"
	"sync"
	"time"
)

const (
	// evictionSample is how many buckets a shard at its cap inspects to admit
	// a new key. Larger samples pick a better victim and cost more per new key.
	evictionSample = 32
	// A shard below its cap but holding at least minSweep buckets inspects
	// sweepSample random buckets every sweepEvery new keys and drops those
	// that have refilled: 2 inspections per new key on average. If every key
	// inserted is eventually dropped, a shard of N buckets holding L live
	// ones drops 2(N-L)/N per insert, so it settles at N = 2L (at least
	// minSweep), never above its cap: this bounds memory below the cap, as
	// tables never shrink.
	minSweep    = 64
	sweepSample = 8
	sweepEvery  = 4
)

// Table holds the token buckets of many keys, identified by 64-bit hashes
// that the caller computes with a keyed hash (so that clients cannot choose
// collisions). It starts no goroutine, and no call costs time proportional
// to the number of keys. It guarantees:
//
//   - Exact below the cap: as long as no shard has ever filled its share of
//     maxKeys, every decision is exactly that of Policy (and of
//     golang.org/x/time/rate).
//   - Never under-limits: past the cap, a key that is not held exactly
//     starts from an estimate that is never fuller than its true state, so
//     evicting a key, or rotating keys through the table, gives nothing
//     back. The price is over-limiting: a new key whose estimate collides
//     with drained keys is limited too.
//   - Eviction costs clients little: at the cap a new key evicts, of a
//     sample, the bucket whose eviction may cost its client least (a
//     drained one first, a light client that refills between its requests
//     last), and during a flood Reset pins its bucket until its client
//     leaves it full (at most an eighth of a shard: see Reset).
//   - Bounded memory, whatever the number of keys: at most maxKeys exact
//     buckets, plus, for each shard that has evicted, an approximate memory
//     of fixed size (proportional to the shard's capacity) that is released
//     once idle. Below the cap, refilled buckets are dropped as new keys
//     arrive, so the table holds about twice the keys active within one
//     refill time. Tables grow but do not shrink.
//
// The README's "Memory" section gives the bytes per key and the
// over-limiting rates, with the commands that measure them.
//
// A Table is safe for concurrent use. The zero value is not usable; use
// NewTable.
type Table struct {
	policy Policy
	clock  sketchClock
	shards []shard
	mask   uint64
}

type shard struct {
	mu  sync.Mutex
	ex  exact   // exact buckets
	sk  *sketch // approximate memory; nil until the shard fills
	max int32
	// admitted counts new keys admitted below the cap, to sweep every
	// sweepEvery of them.
	admitted uint32
	now      int64 // latest time seen, for Stats
	// Counted under mu: no atomics on the hot path.
	evictions, allowed, limited uint64
}

// NewTable returns a table for policy that keeps at most maxKeys exact
// buckets. maxKeys must be at least 1. It allocates its shard array only;
// buckets and sketches are allocated as keys arrive.
func NewTable(policy Policy, maxKeys int) *Table {
	n := 1
	for n < 256 && maxKeys/(n*2) >= 64 {
		n *= 2
	}
	t := &Table{policy: policy, clock: newSketchClock(policy.tau), shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range t.shards {
		c := maxKeys / n
		if i < maxKeys%n {
			c++
		}
		t.shards[i].max = int32(min(c, math.MaxInt32)) // more than any memory holds
	}
	return t
}

func (t *Table) shard(h uint64) *shard { return &t.shards[(h^h>>32)&t.mask] }

// key returns hash h as the exact table keys it: shifted left, as bit 0 is
// the slot's pin mark, and 2 for what would be 0, which marks empty slots
// (so hashes 0 and 1 share a bucket, as do h and h^1<<63: collisions, which
// limit more, never less).
func key(h uint64) uint64 {
	if h <<= 1; h == 0 {
		return 2
	}
	return h
}

// lock locks h's shard and records now for Stats. It returns key(h).
func (t *Table) lock(h uint64, now int64) (*shard, uint64, int64) {
	h = key(h)
	s := t.shard(h)
	s.mu.Lock()
	if now > s.now {
		s.now = now
	}
	return s, h, s.now
}

// state returns h's exact state, or its estimate; ok says it is exact.
func (s *shard) state(t *Table, h uint64, now int64) (tat int64, ok bool) {
	if tat, ok = s.ex.get(h); !ok {
		tat = s.estimate(t, h, now)
	}
	return tat, ok
}

// Take charges n tokens at now to the bucket of hash h (1 <= n <= Burst,
// checked by the caller). A denied Take changes nothing. It reports whether
// the tokens were charged and the bucket's state after the call (see
// Policy.Read): remaining whole tokens, the wait until one whole token
// exists (for a denied Take: until n tokens exist), and the time until full.
func (t *Table) Take(h uint64, now, n int64) (allowed bool, remaining int, wait, full time.Duration) {
	s, h, now := t.lock(h, now)
	i, ok := s.ex.find(h)
	var tat int64
	if ok {
		tat = s.ex.slots[i].tat
	} else {
		tat = s.estimate(t, h, now)
	}
	next, allowed := t.policy.Take(tat, now, n)
	need := n
	if allowed {
		s.allowed++
		if ok {
			s.ex.slots[i].tat = next
		} else {
			s.put(t, h, next, now, false)
		}
		need = 1
	} else {
		s.limited++
	}
	s.mu.Unlock()
	remaining, wait, full = t.policy.Read(next, now, need)
	return allowed, remaining, wait, full
}

// Refund gives n tokens back at now to the bucket of hash h, never above
// full (1 <= n <= Burst, checked by the caller), and reports the bucket as
// Peek does.
func (t *Table) Refund(h uint64, now, n int64) (allowed bool, remaining int, wait, full time.Duration) {
	s, h, now := t.lock(h, now)
	tat, ok := s.state(t, h, now)
	tat = t.policy.Refund(tat, now, n)
	s.set(t, h, tat, now, ok)
	s.mu.Unlock()
	return t.read(tat, now)
}

// Peek reports the bucket of hash h at now without changing it: allowed
// means it holds at least one whole token; the rest is Policy.Read's.
func (t *Table) Peek(h uint64, now int64) (allowed bool, remaining int, wait, full time.Duration) {
	s, h, now := t.lock(h, now)
	tat, _ := s.state(t, h, now)
	s.mu.Unlock()
	return t.read(tat, now)
}

// read is Peek's report of state tat at now.
func (t *Table) read(tat, now int64) (allowed bool, remaining int, wait, full time.Duration) {
	remaining, wait, full = t.policy.Read(tat, now, 1)
	return remaining > 0, remaining, wait, full
}

// Reset makes the bucket of hash h full at now, even if the approximate
// memory would limit h. While that memory holds a live time, the full
// bucket is kept exactly (else a flood could later fill h's cells, and h
// would start from them), and pinned if the shard has fewer than maxPins
// pinned buckets: a pinned bucket is evicted only when every sampled bucket
// is pinned, and stays pinned until it has been full for a refill interval
// and the memory would not limit h more than its bucket does (see
// keepsPin). Refund and Mirror pin nothing: their callers include every
// client, and a bound shared with them would let a client take the pins
// of Resets.
func (t *Table) Reset(h uint64, now int64) {
	s, h, now := t.lock(h, now)
	defer s.mu.Unlock()
	_, ok := s.ex.get(h)
	if s.sk == nil || s.sk.liveFraction(t.clock, now) == 0 {
		s.set(t, h, now, now, ok)
		return
	}
	s.put(t, h, now, now, ok)
	if s.ex.pins < maxPins(int(s.max)) {
		s.ex.pin(h, true)
	}
}

// maxPins is how many Reset buckets a shard of capacity shardCap pins: an
// eighth of it (at least one), so that pins never crowd out the table.
func maxPins(shardCap int) int { return max(1, shardCap/8) }

// Mirror records the state a remote store reported at now for the bucket of
// hash h: full again after resetAfter, clamped to [0, 2*Burst*Interval] (a
// remote bucket may be up to one burst in debt: see addrlimit.DebtStore). Of
// the state already held and the reported one, the later (emptier) is kept,
// so answers that arrive out of order never make the copy fuller. The state
// is kept exactly, whatever the approximate memory says.
func (t *Table) Mirror(h uint64, now int64, resetAfter time.Duration) {
	s, h, now := t.lock(h, now)
	defer s.mu.Unlock()
	tat := now + min(max(int64(resetAfter), 0), 2*t.policy.tau)
	old, ok := s.ex.get(h)
	// Answers of concurrent requests may arrive out of order: keep the
	// latest state any of them reported, so an older, fuller answer never
	// undoes a newer one. (After a remote refund this keeps the local copy
	// stricter than the store until the next charge: the safe direction.)
	s.set(t, h, max(tat, old), now, ok)
}

// estimate returns the state of a key that is not in the exact table: full
// (0), or the approximate memory's estimate, never earlier than the truth.
// It runs with s.mu held, as do all shard methods.
func (s *shard) estimate(t *Table, h uint64, now int64) int64 {
	if s.sk == nil {
		return 0
	}
	return s.sk.estimate(t.clock, h, now)
}

// free reports whether the exact bucket of h, in state tat, can be dropped
// without changing any decision: it is full and the approximate memory does
// not limit h.
func (s *shard) free(t *Table, h uint64, tat, now int64) bool {
	return tat <= now && s.estimate(t, h, now) <= now
}

// set gives h the state tat, exactly unless dropping the bucket changes
// nothing. exists says whether h is in the exact table.
func (s *shard) set(t *Table, h uint64, tat, now int64, exists bool) {
	if s.free(t, h, tat, now) {
		if exists {
			s.ex.remove(h)
		}
		return
	}
	s.put(t, h, tat, now, exists)
}

// put stores tat as h's exact state, making room first if h is new.
func (s *shard) put(t *Table, h uint64, tat, now int64, exists bool) {
	if !exists {
		s.makeRoom(t, now)
	}
	s.ex.set(h, tat, int(s.max))
}

// makeRoom prepares the shard to admit one new key. Below the cap it sweeps
// a few buckets. At the cap it samples evictionSample buckets and drops the
// free ones that have been full for a whole refill time; failing any, it
// removes the one whose eviction costs least (see cost), into the
// approximate memory unless it is free.
func (s *shard) makeRoom(t *Table, now int64) {
	if s.sk != nil && s.sk.idle(t.clock, now) {
		s.sk = nil // every cell free and unused for 16 refill times
	}
	if s.ex.n < int(s.max) {
		if s.ex.n >= minSweep {
			if s.admitted++; s.admitted%sweepEvery == 0 {
				s.sweep(t, now)
			}
		}
		return
	}
	// Drop after the scan (removing shifts entries).
	var idle [evictionSample]uint64
	var cand [evictionSample]candidate
	nIdle, nCand := 0, 0
	s.ex.sample(evictionSample, func(sl slot) bool {
		c := candidate{slot: sl}
		if sl.tat <= now {
			c.est = s.estimate(t, sl.key(), now)
		}
		if c.est <= now && now-sl.tat >= t.policy.tau {
			idle[nIdle] = sl.key()
			nIdle++
		} else {
			cand[nCand] = c
			nCand++
		}
		return true
	})
	if nIdle > 0 {
		for _, h := range idle[:nIdle] {
			s.ex.remove(h)
		}
		return
	}
	v := s.victim(t, cand[:nCand], now)
	s.ex.remove(v.key())
	if v.tat <= now && v.est <= now {
		return // free
	}
	s.evictions++
	if v.tat > now {
		if s.sk == nil {
			s.sk = newSketch(t.clock, int(s.max), now)
		}
		// A mirrored debt beyond empty is not kept: the sketch reads times
		// up to about one refill ahead (see sketch).
		s.sk.merge(t.clock, v.key(), min(v.tat, now+t.policy.tau), now)
	}
}

// candidate is a sampled bucket, with the approximate memory's estimate
// for its key when the bucket is full (tat <= now).
type candidate struct {
	slot
	est int64
}

// cost is what evicting c at now may cost its client, in nanoseconds of
// its bucket's time: lower is cheaper; ties go to the later state (the
// emptier bucket, or the one full the longest). A key out of the exact
// table starts from its sketch estimate, the earliest of its cells, which
// other keys may have pushed as late as now + tau (and rounding up to a
// unit). So:
//   - a full bucket whose estimate says full (free: dropped, not merged)
//     loses its tokens only if all its cells turn live before it returns:
//     f3 (the chance that a key's cells are all live, from the first row's
//     fill) times tau less the time it has been full (a client gone
//     longer is less likely to return);
//   - a full bucket whose estimate is later loses the difference, for
//     certain;
//   - a bucket that has spent tokens loses the rounding, up to a unit,
//     and with chance f3 what it holds: nothing when drained.
//
// So a drained bucket is the cheapest, and a light client, which refills
// between its requests, the dearest, however often a flood samples it.
func (c candidate) cost(t *Table, now int64, f3 float64) int64 {
	switch {
	case c.tat <= now && c.est <= now:
		return int64(f3 * float64(t.policy.tau-min(now-c.tat, t.policy.tau)))
	case c.tat <= now:
		return c.est - now
	}
	return t.clock.unit + int64(f3*float64(now+t.policy.tau-c.tat))
}

// keepsPin reports whether the pinned bucket sl stays pinned at now: until
// its client has left it full for a refill interval and the approximate
// memory would not make it emptier, evicting it could undo the Reset.
func (s *shard) keepsPin(t *Table, sl slot, now int64) bool {
	return sl.tat > now-t.policy.interval || s.held(t, sl.key(), sl.tat, now)
}

// victim returns the cheapest of cand to evict (see cost): among unpinned
// buckets not in debt, else among those in debt (least debt first), else
// among all. A pinned bucket that no longer keeps its pin is unpinned.
func (s *shard) victim(t *Table, cand []candidate, now int64) candidate {
	f3 := 0.0
	if s.sk != nil {
		f := s.sk.liveFraction(t.clock, now)
		f3 = f * f * f
	}
	best, bestTier, bestCost := 0, 3, int64(0)
	for i := range cand {
		c := &cand[i]
		if c.isPinned() && !s.keepsPin(t, c.slot, now) {
			s.ex.pin(c.key(), false)
			c.h = c.key()
		}
		tier, cost := 0, c.cost(t, now, f3)
		switch {
		case c.isPinned():
			tier = 2
		case c.tat > now+t.policy.tau:
			tier, cost = 1, c.tat
		}
		if tier < bestTier || tier == bestTier && (cost < bestCost || cost == bestCost && c.tat > cand[best].tat) {
			best, bestTier, bestCost = i, tier, cost
		}
	}
	return cand[best]
}

// held reports whether the approximate memory would give h, in state tat,
// a later state than its own (rounding aside): evicting it would limit its
// client more than it has spent.
func (s *shard) held(t *Table, h uint64, tat, now int64) bool {
	return s.estimate(t, h, now) > ceilDiv(max(tat, now), t.clock.unit)*t.clock.unit
}

// sweep drops the free buckets among sweepSample random ones, but not
// those that keep a pin.
func (s *shard) sweep(t *Table, now int64) {
	var free [sweepSample]uint64
	nFree := 0
	s.ex.sample(sweepSample, func(sl slot) bool {
		if s.free(t, sl.key(), sl.tat, now) && !(sl.isPinned() && s.keepsPin(t, sl, now)) {
			free[nFree] = sl.key()
			nFree++
		}
		return true
	})
	for _, h := range free[:nFree] {
		s.ex.remove(h)
	}
}

// TableStats is a snapshot of a Table's counters and memory.
type TableStats struct {
	Allowed, Limited uint64 // Take decisions
	Keys             int    // exact buckets held
	// Evictions counts buckets that had not refilled and left the exact
	// table to make room (their state went to the approximate memory).
	Evictions uint64
	// ApproxKeys estimates how many keys have a live state in the approximate
	// memory (linear counting over the first row of each sketch); ApproxFill
	// is the fraction of those rows' cells that hold a live time, 0 without
	// sketch.
	ApproxKeys int
	ApproxFill float64
}

// Stats returns the table's counters. It locks each shard in turn (twice)
// and sums, for each shard that has a sketch, the counts of its first row's
// live cells by time (at most window of them, kept as merges write the
// cells), judging liveness at the latest time any shard has seen. Its cost
// does not grow with the table's cap beyond the number of shards (at most
// 256).
func (t *Table) Stats() TableStats {
	var st TableStats
	now := int64(math.MinInt64)
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		now = max(now, s.now)
		st.Allowed += s.allowed
		st.Limited += s.limited
		st.Keys += s.ex.n
		st.Evictions += s.evictions
		s.mu.Unlock()
	}
	live, width, approx := 0, 0, 0.0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		if s.sk != nil {
			l, w := s.sk.fill(t.clock, now)
			live, width = live+l, width+w
			approx += linearCount(l, w)
		}
		s.mu.Unlock()
	}
	if width > 0 {
		st.ApproxFill = float64(live) / float64(width)
	}
	st.ApproxKeys = int(math.Round(approx))
	return st
}

// linearCount estimates how many distinct keys set live of w cells
// (Whang et al. 1990); a saturated row gives its upper end, w ln w.
func linearCount(live, w int) float64 {
	if live >= w {
		return float64(w) * math.Log(float64(w))
	}
	return -float64(w) * math.Log1p(-float64(live)/float64(w))
}
