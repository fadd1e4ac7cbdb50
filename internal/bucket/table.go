package bucket

import (
	"sync"
	"sync/atomic"
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

// Take charges one request at now to the bucket of hash h.
func (t *Table) Take(h uint64, now int64) Result {
	s := &t.shards[(h^h>>32)&t.mask]
	s.mu.Lock()
	tat, ok := s.tats[h]
	if !ok && !s.admit(t.policy, now) {
		s.mu.Unlock()
		t.overflows.Add(1)
		return t.overflow.take(t.policy, 0, now)
	}
	res := s.charge(t.policy, h, tat, now)
	s.mu.Unlock()
	return res
}

// charge applies one request to the bucket of h, whose state is tat, and
// counts the decision. It runs with s.mu held.
func (s *shard) charge(p Policy, h uint64, tat, now int64) Result {
	tat, res := p.Take(tat, now)
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

func (s *shard) take(p Policy, h uint64, now int64) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charge(p, h, s.tats[h], now)
}

// Len returns the number of buckets held, the overflow bucket excluded.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.tats)
		s.mu.Unlock()
	}
	return n
}

// Counts returns how many requests the table allowed and denied.
func (t *Table) Counts() (allowed, limited uint64) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		allowed, limited = allowed+s.allowed, limited+s.limited
		s.mu.Unlock()
	}
	s := &t.overflow
	s.mu.Lock()
	defer s.mu.Unlock()
	return allowed + s.allowed, limited + s.limited
}

// Evictions returns how many non-full buckets were dropped to make room.
func (t *Table) Evictions() uint64 {
	var n uint64
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.evictions
		s.mu.Unlock()
	}
	return n
}

// Overflows returns how many requests were charged to the overflow bucket
// because their shard was full of empty buckets.
func (t *Table) Overflows() uint64 { return t.overflows.Load() }
