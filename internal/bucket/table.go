package bucket

import (
	"sync"
	"sync/atomic"
	"time"
)

// evictionSample is how many entries a full shard inspects to make room for a
// new key. Larger samples pick a better victim and cost more per new key.
const evictionSample = 32

// minSweep is the smallest shard size at which a shard sweeps out its full
// buckets. A shard sweeps whenever it has doubled since its last sweep, so the
// table stays within about twice the set of clients active within one full
// refill time, at an amortised constant cost paid only by new keys.
const minSweep = 64

// Table holds the buckets of many keys, identified by 64-bit hashes that the
// caller computes (with a keyed hash, so that clients cannot choose
// collisions). It keeps at most its capacity of buckets and never needs a
// background goroutine:
//   - a bucket that has refilled completely is equal to a new one and is dropped
//     when its shard sweeps (each time it has doubled since the last sweep) or
//     comes across it while making room;
//   - a shard at its cap that must admit a new key drops the fullest of a random
//     sample of its buckets, but never an empty one (a client being limited right
//     now): evicting it would hand an abuser a fresh bucket;
//   - when every sampled bucket is empty, the new key is not admitted and is
//     charged to one shared overflow bucket instead, so an address flood can
//     neither grow memory nor buy anyone a fresh budget.
//
// A Table is safe for concurrent use. The zero value is not usable; use NewTable.
type Table struct {
	policy    Policy
	shards    []shard
	mask      uint64
	overflow  shard // one bucket, key 0
	overflows atomic.Uint64
}

type shard struct {
	mu        sync.Mutex
	tats      map[uint64]int64
	max       int
	sweepAt   int // sweep before admitting a key at this size
	evictions uint64
	allowed   uint64 // decisions, counted under mu: no atomics on the hot path
	limited   uint64
	_         [8]byte // keep neighbouring shards off one cache line
}

// NewTable returns a table for policy that keeps at most maxKeys buckets.
// maxKeys must be at least 1.
func NewTable(policy Policy, maxKeys int) *Table {
	n := 1
	for n < 256 && maxKeys/(n*2) >= 64 {
		n *= 2
	}
	t := &Table{policy: policy, shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range t.shards {
		t.shards[i].max = maxKeys / n
		if i < maxKeys%n {
			t.shards[i].max++
		}
		t.shards[i].tats = make(map[uint64]int64)
		t.shards[i].sweepAt = minSweep
	}
	t.overflow.tats = make(map[uint64]int64, 1)
	return t
}

// Policy returns the policy the table enforces.
func (t *Table) Policy() Policy { return t.policy }

// Take charges n tokens at now to the bucket of hash h (1 <= n <= Burst,
// checked by the caller).
func (t *Table) Take(h uint64, now, n int64) Result {
	s := t.shard(h)
	s.mu.Lock()
	tat, ok := s.tats[h]
	if !ok && !s.admit(t.policy, now) {
		s.mu.Unlock()
		t.overflows.Add(1)
		return t.overflow.take(t.policy, 0, now, n)
	}
	res := s.charge(t.policy, h, tat, now, n)
	s.mu.Unlock()
	return res
}

func (t *Table) shard(h uint64) *shard { return &t.shards[(h^h>>32)&t.mask] }

// Refund gives n tokens back at now to the bucket of hash h, never above full.
func (t *Table) Refund(h uint64, now, n int64) Result {
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	tat, ok := s.tats[h]
	if !ok {
		return t.policy.Peek(0, now)
	}
	tat, res := t.policy.Refund(tat, now, n)
	if t.policy.Full(tat, now) {
		delete(s.tats, h)
	} else {
		s.tats[h] = tat
	}
	return res
}

// Peek reports the bucket of hash h at now without changing it.
func (t *Table) Peek(h uint64, now int64) Result {
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.policy.Peek(s.tats[h], now)
}

// Reset makes the bucket of hash h full.
func (t *Table) Reset(h uint64, _ int64) {
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tats, h)
}

// Mirror sets the bucket of hash h to the state a remote store reported at
// now: full again after resetAfter.
func (t *Table) Mirror(h uint64, now int64, resetAfter time.Duration) {
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	tat := now + min(int64(max(resetAfter, 0)), t.policy.tau)
	if t.policy.Full(tat, now) {
		delete(s.tats, h)
		return
	}
	if _, ok := s.tats[h]; ok || s.admit(t.policy, now) {
		s.tats[h] = tat
	}
}

// charge applies n tokens to the bucket of h, whose state is tat, and counts
// the decision. It runs with s.mu held.
func (s *shard) charge(p Policy, h uint64, tat, now, n int64) Result {
	tat, res := p.Take(tat, now, n)
	if res.Allowed {
		s.tats[h] = tat
		s.allowed++
	} else {
		s.limited++
	}
	return res
}

// admit makes room for one more key, or reports that it cannot without
// evicting an empty bucket. It runs with s.mu held.
func (s *shard) admit(p Policy, now int64) bool {
	if len(s.tats) >= s.sweepAt {
		for k, tat := range s.tats {
			if p.Full(tat, now) {
				delete(s.tats, k)
			}
		}
		s.sweepAt = max(2*len(s.tats), minSweep)
	}
	if len(s.tats) < s.max {
		return true
	}
	var victim uint64
	victimTAT, found, freed := int64(0), false, false
	n := 0
	for k, tat := range s.tats {
		switch {
		case p.Full(tat, now):
			delete(s.tats, k)
			freed = true
		case !p.Empty(tat, now) && (!found || tat < victimTAT):
			victim, victimTAT, found = k, tat, true
		}
		if n++; n == evictionSample {
			break
		}
	}
	if freed {
		return true
	}
	if found {
		delete(s.tats, victim)
		s.evictions++
		return true
	}
	return false
}

func (s *shard) take(p Policy, h uint64, now, n int64) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charge(p, h, s.tats[h], now, n)
}

// TableStats is a snapshot of a Table's counters.
type TableStats struct {
	Allowed, Limited uint64 // Take decisions
	Keys             int    // exact buckets held
	Evictions        uint64 // buckets that had not refilled, dropped to make room
	ApproxKeys       int    // estimate of keys whose state lives only in the approximate memory
	ApproxFill       float64
}

// Stats returns the table's counters. It locks each shard in turn.
func (t *Table) Stats() TableStats {
	var st TableStats
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		st.Allowed += s.allowed
		st.Limited += s.limited
		st.Keys += len(s.tats)
		st.Evictions += s.evictions
		s.mu.Unlock()
	}
	s := &t.overflow
	s.mu.Lock()
	st.Allowed += s.allowed
	st.Limited += s.limited
	s.mu.Unlock()
	return st
}
