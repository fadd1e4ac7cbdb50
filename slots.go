package addrlimit

import (
	"sync"
	"sync/atomic"
)

// slotTable counts the in-flight slots held per key of one policy, in
// memory. A request of a key seen before takes and gives back its slot
// with one lock-free map read and two atomic operations (BenchmarkSlotTable):
// each key's count is an entry that stays in the map at 0 when its last
// request ends, until a sweep removes the idle ones. An insert sweeps when
// the entries reach twice those the last sweep left plus slotSweepSlack,
// or the bound: so the entries stay below about twice the keys holding
// slots plus slotSweepSlack, and never above maxKeys. At the bound, a new
// key sweeps only once maxKeys/16 slots were released to an idle key since
// the last sweep (else it is refused at once), so that a flood of new keys
// costs each release a bounded share of the sweeps (16 entries visited).
type slotTable struct {
	limit   atomic.Int32 // SetPolicies may change it while slots are held
	maxKeys int64
	keys    sync.Map     // uint64 (the key's hash) → *slotCount
	entries atomic.Int64 // in keys, counted before they are stored
	sweepAt atomic.Int64 // the entries at which an insert sweeps
	sweep   sync.Mutex   // one sweep at a time
	// idle counts the releases that left a key idle, spread over padded
	// counters (by the key's hash) so that releases of many keys do not
	// contend; idleSwept is their sum when the last sweep began.
	idle [slotIdleShards]struct {
		n atomic.Int64
		_ [56]byte
	}
	idleSwept atomic.Int64

	// The waiting requests (WithInFlightWait): rare, so under a lock,
	// which a release takes only while waiters > 0.
	waiters atomic.Int64
	waitMu  sync.Mutex
	waiting map[uint64]int32 // per key
	wake    chan struct{}    // closed by the next release, if requests wait
}

// slotCount is one key's slots held; -1 once a sweep removed it from the
// map (an acquire that meets it looks the key up again).
type slotCount struct {
	n     atomic.Int32
	shard uint8 // of slotTable.idle
}

// slotIdleShards is the number of counters of slotTable.idle.
const slotIdleShards = 16

// slotSweepSlack is how many idle entries a table keeps beyond twice the
// entries its last sweep left.
const slotSweepSlack = 1024

// newSlotTable returns the table of limit slots per key, holding at most
// maxKeys keys.
func newSlotTable(limit, maxKeys int) *slotTable {
	t := &slotTable{maxKeys: int64(maxKeys), waiting: map[uint64]int32{}}
	t.limit.Store(int32(limit))
	t.sweepAt.Store(min(int64(maxKeys), slotSweepSlack))
	return t
}

// setLimit makes limit the number of slots per key from the next acquire
// on; the slots held stay held (a lower limit refuses newcomers until
// enough are released).
func (t *slotTable) setLimit(limit int) { t.limit.Store(int32(limit)) }

// acquire takes one of h's slots if fewer than the limit are held, and
// returns the key's count, to release it, and how many are held after the
// call (or that refused it). A key new to a table at its bound, once its
// idle entries are swept, is refused: keys holding slots are never
// evicted.
func (t *slotTable) acquire(h uint64) (*slotCount, int, bool) {
	for {
		v, ok := t.keys.Load(h)
		if !ok {
			if !t.admit() {
				return nil, 0, false
			}
			c := &slotCount{shard: uint8(h >> 60)}
			var loaded bool
			if v, loaded = t.keys.LoadOrStore(h, c); loaded {
				t.entries.Add(-1)
			}
		}
		c := v.(*slotCount)
		for {
			n := c.n.Load()
			if n < 0 {
				break // swept: look the key up again
			}
			if n >= t.limit.Load() {
				return nil, int(n), false
			}
			if c.n.CompareAndSwap(n, n+1) {
				return c, int(n) + 1, true
			}
		}
	}
}

// admit counts an entry about to be stored, sweeping first when the
// entries reach sweepAt, and reports whether the bound leaves room for it.
func (t *slotTable) admit() bool {
	at := t.sweepAt.Load()
	if t.entries.Add(1) <= at {
		return true
	}
	if at >= t.maxKeys && t.idleCount()-t.idleSwept.Load() < max(t.maxKeys/16, 1) {
		t.entries.Add(-1) // at the bound, and too few keys went idle to sweep for
		return false
	}
	t.sweepIdle()
	if t.entries.Load() <= t.maxKeys {
		return true
	}
	t.entries.Add(-1)
	return false
}

// sweepIdle removes the entries of keys holding no slot (and with no
// request waiting), and sets the next sweep's threshold.
func (t *slotTable) sweepIdle() {
	t.sweep.Lock()
	defer t.sweep.Unlock()
	t.idleSwept.Store(t.idleCount())
	t.waitMu.Lock()
	waiting := t.waiting
	t.keys.Range(func(k, v any) bool {
		if h := k.(uint64); waiting[h] == 0 && v.(*slotCount).n.CompareAndSwap(0, -1) {
			t.keys.Delete(h)
			t.entries.Add(-1)
		}
		return true
	})
	t.waitMu.Unlock()
	t.sweepAt.Store(min(t.maxKeys, 2*t.entries.Load()+slotSweepSlack))
}

// release gives back a slot of the key counted by c.
func (t *slotTable) release(c *slotCount) {
	if c.n.Add(-1) == 0 {
		t.idle[c.shard].n.Add(1)
	}
	if t.waiters.Load() > 0 {
		t.notify()
	}
}

// idleCount is the releases that left a key idle, so far.
func (t *slotTable) idleCount() int64 {
	var n int64
	for i := range t.idle {
		n += t.idle[i].n.Load()
	}
	return n
}

// notify wakes the requests waiting for a slot: one was released (in
// this process, of the table or of a fleet store).
func (t *slotTable) notify() {
	t.waitMu.Lock()
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
	t.waitMu.Unlock()
}

// count returns the slots held and the keys holding them.
func (t *slotTable) count() (held, keys int) {
	t.keys.Range(func(_, v any) bool {
		if n := v.(*slotCount).n.Load(); n > 0 {
			held += int(n)
			keys++
		}
		return true
	})
	return held, keys
}

// enqueue counts a request of h as waiting, if fewer than queue do, and
// returns the channel the next release closes.
func (t *slotTable) enqueue(h uint64, queue int) (<-chan struct{}, bool) {
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if int(t.waiting[h]) >= queue {
		return nil, false
	}
	t.waiting[h]++
	t.waiters.Add(1)
	if t.wake == nil {
		t.wake = make(chan struct{})
	}
	return t.wake, true
}

// dequeue counts a request of h as no longer waiting.
func (t *slotTable) dequeue(h uint64) {
	t.waitMu.Lock()
	if n := t.waiting[h]; n > 1 {
		t.waiting[h] = n - 1
	} else {
		delete(t.waiting, h)
	}
	t.waiters.Add(-1)
	t.waitMu.Unlock()
}
