package bucket

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
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
// docs/memory.md gives the bytes per key and the
// over-limiting rates, with the commands that measure them.
//
// A Table is safe for concurrent use. The zero value is not usable; use
// NewTable.
//
// A table of several limits (NewTable's more) keeps, per key, one bucket per
// limit, and decides for all of them at once: under the key's one shard lock
// and at one instant, a Take charges every limit or none. Its guarantees
// hold for each limit: a key evicted has the state of each limit merged into
// that limit's approximate memory.
type Table struct {
	policy Policy            // the first limit
	clock  sketchClock       // the first limit's
	more   []limit           // the further limits, if any
	all    [MaxLimits]Policy // every limit's policy, for the loops over them
	n      int               // the number of limits
	shards []shard
	// maxKeys is NewTable's, for a successor with the same shards.
	maxKeys int
	mask    uint64
	// Reconfiguration (see Successor): the table whose buckets this one
	// inherits, shard by shard, until Settle (read under a pending shard's
	// lock only); how (inherit); and the table that inherited this one's.
	prev    *Table
	inherit inheritance
	next    atomic.Pointer[Table]
}

// MaxLimits bounds the limits of a Table.
const MaxLimits = 4

// limit is one of a table's further limits.
type limit struct {
	policy Policy
	clock  sketchClock
}

type shard struct {
	mu  sync.Mutex
	ex  exact   // exact buckets
	sk  *sketch // the first limit's approximate memory; nil until the shard fills
	max int32
	// admitted counts new keys admitted below the cap, to sweep every
	// sweepEvery of them (a divisor of 1<<16).
	admitted uint16
	// moved is 0, or pending: the shard has not inherited its
	// predecessor's shard yet, or retired: a successor's shard has
	// inherited this one (see Successor).
	moved uint8
	now   int64 // latest time seen, for Stats
	// Counted under mu: no atomics on the hot path.
	evictions, allowed, limited uint64
}

// multiShard is the state of a shard of a table of several limits beyond
// what a single limit needs, kept by its exact table (ex.more), so that a
// shard of one limit pays a pointer for it.
type multiShard struct {
	stride  int                    // the further limits
	tats    []int64                // their states, stride per slot of the exact table
	sk      [MaxLimits - 1]*sketch // their approximate memories
	limited [MaxLimits]uint64      // denials by the limit that denied (see Take)
}

// NewTable returns a table that keeps at most maxKeys exact buckets for
// policy and, if more are given, for the further limits more, all decided
// together (at most MaxLimits in all). maxKeys must be at least 1. It
// allocates its shard array only; buckets and sketches are allocated as
// keys arrive.
func NewTable(policy Policy, maxKeys int, more ...Policy) *Table {
	if len(more) >= MaxLimits {
		panic("bucket: more than MaxLimits limits")
	}
	n := 1
	for n < 256 && maxKeys/(n*2) >= 64 {
		n *= 2
	}
	t := &Table{policy: policy, clock: newSketchClock(policy.tau), shards: make([]shard, n), mask: uint64(n - 1), maxKeys: maxKeys}
	t.all[0], t.n = policy, 1+len(more)
	for i, p := range more {
		t.more = append(t.more, limit{policy: p, clock: newSketchClock(p.tau)})
		t.all[1+i] = p
	}
	for i := range t.shards {
		c := maxKeys / n
		if i < maxKeys%n {
			c++
		}
		s := &t.shards[i]
		s.max = int32(min(c, math.MaxInt32)) // more than any memory holds
		if len(more) > 0 {
			s.ex.more = &multiShard{stride: len(more)}
		}
	}
	return t
}

// limits is the number of the table's limits.
func (t *Table) limits() int { return t.n }

// limit returns limit j's policy and sketch clock.
func (t *Table) limit(j int) (Policy, sketchClock) {
	if j == 0 {
		return t.policy, t.clock
	}
	return t.more[j-1].policy, t.more[j-1].clock
}

// sketchOf returns limit j's approximate memory (nil if none), and where it
// is kept.
func (s *shard) sketchOf(j int) **sketch {
	if j == 0 {
		return &s.sk
	}
	return &s.ex.more.sk[j-1]
}

func (t *Table) shardIndex(h uint64) int { return int((h ^ h>>32) & t.mask) }

func (t *Table) shard(h uint64) *shard { return &t.shards[t.shardIndex(h)] }

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

// lock locks h's shard and records now for Stats. It returns the table
// that holds h's buckets (t, or the successor of a reconfigured t: see
// Successor), the shard, key(h) and the shard's time.
func (t *Table) lock(h uint64, now int64) (*Table, *shard, uint64, int64) {
	h = key(h)
	s := t.shard(h)
	s.mu.Lock()
	if s.moved != 0 {
		return t.lockMoved(h, s, now)
	}
	if now > s.now {
		s.now = now
	}
	return t, s, h, s.now
}

// lockMoved is lock for a locked shard s of h that is pending or retired
// (see Successor).
func (t *Table) lockMoved(h uint64, s *shard, now int64) (*Table, *shard, uint64, int64) {
	i := t.shardIndex(h)
	for {
		if s.moved == pending {
			t.move(i, s, now)
		}
		if s.moved != retired {
			if now > s.now {
				s.now = now
			}
			return t, s, h, s.now
		}
		s.mu.Unlock()
		t = t.next.Load()
		s = &t.shards[i]
		s.mu.Lock()
	}
}

// states returns h's state under each limit, exact or estimated, and
// h's slot; ok says h is in the exact table.
func (s *shard) states(t *Table, h uint64, now int64, tats *[MaxLimits]int64) (i int, ok bool) {
	if i, ok = s.ex.find(h); ok {
		s.ex.states(i, tats)
		return i, true
	}
	for j := range t.limits() {
		tats[j] = s.estimate(t, j, h, now)
	}
	return i, false
}

// Fulls is what a Table reports of a key's buckets: for each limit, in the
// order of NewTable's policies, the time until its bucket is full (its
// whole state: see Policy.Read); entries past the table's limits are zero.
type Fulls [MaxLimits]time.Duration

// fulls is Fulls of the states tats at now.
func (t *Table) fulls(tats *[MaxLimits]int64, now int64) (f Fulls) {
	for j := range t.limits() {
		f[j] = time.Duration(max(tats[j], now) - now)
	}
	return f
}

// Take charges n tokens at now to every bucket of hash h, if each holds n
// (1 <= n <= the smallest Burst, checked by the caller); a denied Take
// changes nothing. It reports whether the tokens were charged, the state
// of each bucket after the call, and tight, the tightest limit by the rule
// of the root's internal/limits.Tightest for the tokens the next call
// needs (n after a denial, 1 after an admission): the limit with the
// longest wait for them, or if none must wait, the one holding the fewest
// tokens, fractions counted; of equals, the first. After a denial, tight
// is the limit that denied with the longest wait, counted in
// TableStats.LimitedBy.
//
// The table that decided is by: t, or after a reconfiguration its successor
// (see Successor), whose limits the states f are of.
func (t *Table) Take(h uint64, now, n int64) (allowed bool, tight int, f Fulls, by *Table) {
	allowed, tight, by = t.TakeTo(h, now, n, &f)
	return allowed, tight, f, by
}

// TakeTo is Take writing the states into *f, a zero Fulls of the caller's:
// a Fulls returned and then copied stalls on store forwarding, a cost the
// allowed path of the root package measured.
func (t *Table) TakeTo(h uint64, now, n int64, f *Fulls) (allowed bool, tight int, by *Table) {
	t, s, h, now := t.lock(h, now)
	if s.ex.more != nil {
		return t.takeAll(s, h, now, n, f)
	}
	i, ok := s.ex.find(h)
	var tat int64
	if ok {
		tat = s.ex.slots[i].tat
	} else {
		tat = s.estimate(t, 0, h, now)
	}
	next, allowed := t.policy.Take(tat, now, n)
	if allowed {
		s.allowed++
		if ok {
			s.ex.slots[i].tat = next
		} else {
			s.put(t, h, &[MaxLimits]int64{next}, now, false)
		}
	} else {
		s.limited++
	}
	s.mu.Unlock()
	f[0] = time.Duration(max(next, now) - now)
	return allowed, 0, t
}

// takeAll is TakeTo for a table of several limits, with s locked. It finds
// the tightest limit in the loops that decide, so that the caller divides
// and compares nothing more (BenchmarkLimits: three limits against one).
func (t *Table) takeAll(s *shard, h uint64, now, n int64, f *Fulls) (allowed bool, tight int, by *Table) {
	var tats [MaxLimits]int64
	all := t.all[:t.n]
	i, ok := s.ex.find(h)
	var row []int64 // the key's states after the first limit's, in place
	if ok {
		m := s.ex.more
		row = m.tats[i*m.stride : i*m.stride+len(all)-1]
		tats[0] = s.ex.slots[i].tat
		for j, tat := range row { // a loop, not copy: no call to memmove
			tats[1+j] = tat
		}
	} else {
		for j := range all {
			tats[j] = s.estimate(t, j, h, now)
		}
	}
	// One pass over the limits finds, for admission, every limit's wait
	// for n tokens (a limit that must wait denies: the longest names it)
	// and, for the admitted call, the tightest limit for one more token:
	// the longest wait, else the fewest tokens, fractions counted, which is
	// the least slack (tau - full) per interval, compared multiplied out in
	// 128 bits.
	var over, wait int64 // the longest wait for n tokens, and for 1 after
	var slack, per int64 // the fewest's slack and interval
	denier, waiter, fewest := 0, 0, 0
	for j := range all {
		p := &all[j]
		full := max(tats[j], now) - now + n*p.interval // if admitted
		f[j] = time.Duration(full)
		if o := full - p.tau; o > over {
			denier, over = j, o
		}
		if w := full + p.interval - p.tau; w > wait {
			waiter, wait = j, w
		}
		sl := p.tau - full // >= 0 if admitted; if not, unused
		if j == 0 {
			slack, per = sl, p.interval
			continue
		}
		ahi, alo := bits.Mul64(uint64(sl), uint64(per))
		bhi, blo := bits.Mul64(uint64(slack), uint64(p.interval))
		if ahi < bhi || ahi == bhi && alo < blo {
			fewest, slack, per = j, sl, p.interval
		}
	}
	if over > 0 {
		s.limited++
		s.ex.more.limited[denier]++
		s.mu.Unlock()
		for j := range all { // the states unchanged
			f[j] -= time.Duration(n * all[j].interval)
		}
		return false, denier, t
	}
	tight = fewest
	if wait > 0 {
		tight = waiter
	}
	for j := range all {
		tats[j] = now + int64(f[j])
	}
	s.allowed++
	if ok {
		s.ex.slots[i].tat = tats[0]
		for j := range row {
			row[j] = tats[1+j]
		}
	} else {
		s.put(t, h, &tats, now, false)
	}
	s.mu.Unlock()
	return true, tight, t
}

// Refund gives n tokens back at now to every bucket of hash h, never above
// full (1 <= n <= the smallest Burst, checked by the caller), and reports
// them as Peek does.
func (t *Table) Refund(h uint64, now, n int64) (Fulls, *Table) {
	t, s, h, now := t.lock(h, now)
	var tats [MaxLimits]int64
	_, ok := s.states(t, h, now, &tats)
	for j := range t.limits() {
		p, _ := t.limit(j)
		tats[j] = p.Refund(tats[j], now, n)
	}
	s.set(t, h, &tats, now, ok)
	s.mu.Unlock()
	return t.fulls(&tats, now), t
}

// Peek reports the buckets of hash h at now without changing them, and the
// table that holds them (as Take).
func (t *Table) Peek(h uint64, now int64) (Fulls, *Table) {
	t, s, h, now := t.lock(h, now)
	var tats [MaxLimits]int64
	s.states(t, h, now, &tats)
	s.mu.Unlock()
	return t.fulls(&tats, now), t
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
//
// In a table of several limits, every bucket of h is made full, and the
// memory is that of any limit.
func (t *Table) Reset(h uint64, now int64) {
	t, s, h, now := t.lock(h, now)
	defer s.mu.Unlock()
	_, ok := s.ex.find(h)
	full := [MaxLimits]int64{now, now, now, now}
	if !s.live(t, now) {
		s.set(t, h, &full, now, ok)
		return
	}
	s.put(t, h, &full, now, ok)
	if s.ex.pins < maxPins(int(s.max)) {
		s.ex.pin(h, true)
	}
}

// live reports whether any limit's approximate memory holds a live time.
func (s *shard) live(t *Table, now int64) bool {
	for j := range t.limits() {
		_, c := t.limit(j)
		if sk := *s.sketchOf(j); sk != nil && sk.liveFraction(c, now) > 0 {
			return true
		}
	}
	return false
}

// maxPins is how many Reset buckets a shard of capacity shardCap pins: an
// eighth of it (at least one), so that pins never crowd out the table.
func maxPins(shardCap int) int { return max(1, shardCap/8) }

// Mirror records the state a remote store reported at now for the buckets
// of hash h: each full again after its entry of f, clamped to
// [0, 2*Burst*Interval] (a remote bucket may be up to one burst in debt:
// see DebtStore in package github.com/addrlimit/addrlimit/store). Of the
// state already held and the reported one, the later (emptier) is kept for
// each limit, so answers that arrive out of order never make the copy
// fuller. The state is kept exactly, whatever the approximate memory says.
//
// f is of t's limits: if a successor holds h's buckets now, f is carried
// over to its limits by the rule of Successor.
func (t *Table) Mirror(h uint64, now int64, f Fulls) {
	from := t
	t, s, h, now := t.lock(h, now)
	defer s.mu.Unlock()
	for ; from != t; from = from.next.Load() {
		f = from.next.Load().inheritedFulls(f, now)
	}
	var old [MaxLimits]int64
	i, ok := s.ex.find(h)
	if ok {
		s.ex.states(i, &old)
	}
	// Answers of concurrent requests may arrive out of order: keep the
	// latest state any of them reported, so an older, fuller answer never
	// undoes a newer one. (After a remote refund this keeps the local copy
	// stricter than the store until the next charge: the safe direction.)
	var tats [MaxLimits]int64
	for j := range t.limits() {
		p, _ := t.limit(j)
		tats[j] = max(now+min(max(int64(f[j]), 0), 2*p.tau), old[j])
	}
	s.set(t, h, &tats, now, ok)
}

// estimate returns limit j's state of a key that is not in the exact
// table: full (0), or the approximate memory's estimate, never earlier than
// the truth. It runs with s.mu held, as do all shard methods.
func (s *shard) estimate(t *Table, j int, h uint64, now int64) int64 {
	sk := *s.sketchOf(j)
	if sk == nil {
		return 0
	}
	_, c := t.limit(j)
	return sk.estimate(c, h, now)
}

// free reports whether the exact buckets of h, in states tats, can be
// dropped without changing any decision: each is full and the approximate
// memory does not limit h.
func (s *shard) free(t *Table, h uint64, tats *[MaxLimits]int64, now int64) bool {
	for j := range t.limits() {
		if tats[j] > now || s.estimate(t, j, h, now) > now {
			return false
		}
	}
	return true
}

// set gives h the states tats, exactly unless dropping the buckets changes
// nothing. exists says whether h is in the exact table.
func (s *shard) set(t *Table, h uint64, tats *[MaxLimits]int64, now int64, exists bool) {
	if s.free(t, h, tats, now) {
		if exists {
			s.ex.remove(h)
		}
		return
	}
	s.put(t, h, tats, now, exists)
}

// put stores tats as h's exact states, making room first if h is new.
func (s *shard) put(t *Table, h uint64, tats *[MaxLimits]int64, now int64, exists bool) {
	if !exists {
		s.makeRoom(t, now)
	}
	s.ex.set(h, tats, int(s.max))
}

// makeRoom prepares the shard to admit one new key. Below the cap it sweeps
// a few buckets. At the cap it samples evictionSample buckets and drops the
// free ones that have been full for a whole refill time; failing any, it
// removes the one whose eviction costs least (see cost), into the
// approximate memory unless it is free. A key of several limits goes into
// the memory of each limit whose bucket is not full.
func (s *shard) makeRoom(t *Table, now int64) {
	for j := range t.limits() {
		_, c := t.limit(j)
		if sk := s.sketchOf(j); *sk != nil && (*sk).idle(c, now) {
			*sk = nil // every cell free and unused for 16 refill times
		}
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
	s.ex.sample(evictionSample, func(i int, sl slot) bool {
		c := candidate{slot: sl}
		s.ex.states(i, &c.tats)
		isIdle := true
		for j := range t.limits() {
			p, _ := t.limit(j)
			if c.tats[j] <= now {
				c.est[j] = s.estimate(t, j, sl.key(), now)
			}
			isIdle = isIdle && c.est[j] <= now && now-c.tats[j] >= p.tau
		}
		if isIdle {
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
	if v.free(t, now) {
		return
	}
	s.evictions++
	for j := range t.limits() {
		if v.tats[j] <= now {
			continue
		}
		p, c := t.limit(j)
		sk := s.sketchOf(j)
		if *sk == nil {
			*sk = newSketch(c, int(s.max), now)
		}
		// A mirrored debt beyond empty is not kept: the sketch reads times
		// up to about one refill ahead (see sketch).
		(*sk).merge(c, v.key(), min(v.tats[j], now+p.tau), now)
	}
}

// candidate is a sampled bucket with the states of its limits and, for
// each limit whose bucket is full (tat <= now), the approximate memory's
// estimate for its key.
type candidate struct {
	slot
	tats, est [MaxLimits]int64
}

// free reports whether evicting c at now changes nothing: every bucket is
// full and no estimate limits it.
func (c *candidate) free(t *Table, now int64) bool {
	for j := range t.limits() {
		if c.tats[j] > now || c.est[j] > now {
			return false
		}
	}
	return true
}

// cost is what evicting c at now may cost its client, in nanoseconds of
// its buckets' time (summed over its limits): lower is cheaper; ties go to
// the later state (the emptier bucket, or the one full the longest). A key
// out of the exact table starts from its sketch estimate, the earliest of
// its cells, which other keys may have pushed as late as now + tau (and
// rounding up to a unit). So, per limit:
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
// f3 holds each limit's chance.
func (c *candidate) cost(t *Table, now int64, f3 *[MaxLimits]float64) int64 {
	var sum int64
	for j := range t.limits() {
		p, clock := t.limit(j)
		tat, est := c.tats[j], c.est[j]
		switch {
		case tat <= now && est <= now:
			sum += int64(f3[j] * float64(p.tau-min(now-tat, p.tau)))
		case tat <= now:
			sum += est - now
		default:
			sum += clock.unit + int64(f3[j]*float64(now+p.tau-tat))
		}
	}
	return sum
}

// debt is how far c's emptiest limit is in debt beyond empty, in ns: above
// zero only for a bucket a remote store left in debt (see Mirror).
func (c *candidate) debt(t *Table, now int64) int64 {
	d := int64(math.MinInt64)
	for j := range t.limits() {
		p, _ := t.limit(j)
		d = max(d, c.tats[j]-now-p.tau)
	}
	return d
}

// keepsPin reports whether the pinned bucket at slot i stays pinned at now:
// until its client has left every limit full for a refill interval and the
// approximate memory would not make any emptier, evicting it could undo
// the Reset.
func (s *shard) keepsPin(t *Table, i int, now int64) bool {
	var tats [MaxLimits]int64
	s.ex.states(i, &tats)
	h := s.ex.slots[i].key()
	for j := range t.limits() {
		p, _ := t.limit(j)
		if tats[j] > now-p.interval || s.held(t, j, h, tats[j], now) {
			return true
		}
	}
	return false
}

// victim returns the cheapest of cand to evict (see cost): among unpinned
// buckets not in debt, else among those in debt (least debt first), else
// among all. A pinned bucket that no longer keeps its pin is unpinned.
func (s *shard) victim(t *Table, cand []candidate, now int64) candidate {
	var f3 [MaxLimits]float64
	for j := range t.limits() {
		_, c := t.limit(j)
		if sk := *s.sketchOf(j); sk != nil {
			f := sk.liveFraction(c, now)
			f3[j] = f * f * f
		}
	}
	best, bestTier, bestCost := 0, 3, int64(0)
	for i := range cand {
		c := &cand[i]
		if c.isPinned() {
			if j, _ := s.ex.find(c.key()); !s.keepsPin(t, j, now) {
				s.ex.pin(c.key(), false)
				c.h = c.key()
			}
		}
		tier, cost := 0, c.cost(t, now, &f3)
		switch {
		case c.isPinned():
			tier = 2
		case c.debt(t, now) > 0:
			tier, cost = 1, c.debt(t, now)
		}
		if tier < bestTier || tier == bestTier && (cost < bestCost || cost == bestCost && c.tats[0] > cand[best].tats[0]) {
			best, bestTier, bestCost = i, tier, cost
		}
	}
	return cand[best]
}

// held reports whether limit j's approximate memory would give h, in state
// tat, a later state than its own (rounding aside): evicting it would limit
// its client more than it has spent.
func (s *shard) held(t *Table, j int, h uint64, tat, now int64) bool {
	_, c := t.limit(j)
	return s.estimate(t, j, h, now) > ceilDiv(max(tat, now), c.unit)*c.unit
}

// sweep drops the free buckets among sweepSample random ones, but not
// those that keep a pin.
func (s *shard) sweep(t *Table, now int64) {
	var free [sweepSample]uint64
	nFree := 0
	s.ex.sample(sweepSample, func(i int, sl slot) bool {
		var tats [MaxLimits]int64
		s.ex.states(i, &tats)
		if s.free(t, sl.key(), &tats, now) && !(sl.isPinned() && s.keepsPin(t, i, now)) {
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
	// LimitedBy counts denied Takes by the limit that denied (see Take).
	LimitedBy [MaxLimits]uint64
	Keys      int // exact buckets held
	// Evictions counts buckets that had not refilled and left the exact
	// table to make room (their state went to the approximate memory).
	Evictions uint64
	// ApproxKeys estimates how many keys have a live state in the approximate
	// memory (linear counting over the first row of each sketch); ApproxFill
	// is the fraction of those rows' cells that hold a live time, 0 without
	// sketch. With several limits, both are those of the limit whose memory
	// holds the most.
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
		s := t.lockShard(i, math.MinInt64)
		now = max(now, s.now)
		st.Allowed += s.allowed
		st.Limited += s.limited
		if s.ex.more != nil {
			for j, n := range s.ex.more.limited {
				st.LimitedBy[j] += n
			}
		} else {
			st.LimitedBy[0] += s.limited
		}
		st.Keys += s.ex.n
		st.Evictions += s.evictions
		s.mu.Unlock()
	}
	for j := range t.limits() {
		keys, fill := t.approx(j, now)
		if keys > st.ApproxKeys || keys == st.ApproxKeys && fill > st.ApproxFill {
			st.ApproxKeys, st.ApproxFill = keys, fill
		}
	}
	return st
}

// approx is limit j's approximate memory for Stats at now: ApproxKeys and
// ApproxFill.
func (t *Table) approx(j int, now int64) (int, float64) {
	_, c := t.limit(j)
	live, width, approx := 0, 0, 0.0
	for i := range t.shards {
		s := t.lockShard(i, now)
		if s.moved == retired { // its memory went to the successor
			s.mu.Unlock()
			continue
		}
		if sk := *s.sketchOf(j); sk != nil {
			l, w := sk.fill(c, now)
			live, width = live+l, width+w
			approx += linearCount(l, w)
		}
		s.mu.Unlock()
	}
	fill := 0.0
	if width > 0 {
		fill = float64(live) / float64(width)
	}
	return int(math.Round(approx)), fill
}

// linearCount estimates how many distinct keys set live of w cells
// (Whang et al. 1990); a saturated row gives its upper end, w ln w.
func linearCount(live, w int) float64 {
	if live >= w {
		return float64(w) * math.Log(float64(w))
	}
	return -float64(w) * math.Log1p(-float64(live)/float64(w))
}
