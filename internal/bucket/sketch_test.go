package bucket

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sketchModel drives a sketch the way a shard does (release when idle) next
// to an exact map of the last state merged for each key and an exact,
// never-wrapping copy of every cell.
type sketchModel struct {
	t     testing.TB
	clock sketchClock
	cap   int // shard capacity the sketch is sized for
	sk    *sketch
	truth map[uint64]int64
	// shadow[i] is the latest time (units) merged into cell i; written[i]
	// when a merge last wrote cell i.
	shadow, written []int64
}

func newSketchModel(t testing.TB, tau int64, shardCap int) *sketchModel {
	return &sketchModel{t: t, clock: newSketchClock(tau), cap: shardCap, truth: map[uint64]int64{}}
}

func (m *sketchModel) merge(h uint64, tat, now int64) {
	if m.sk != nil && m.sk.idle(m.clock, now) {
		m.sk = nil
	}
	if m.sk == nil {
		m.sk = newSketch(m.clock, m.cap, now)
		m.shadow = make([]int64, len(m.sk.cells))
		m.written = make([]int64, len(m.sk.cells))
	}
	tu := ceilDiv(tat, m.clock.unit)
	if uint8(tu) == 0 {
		tu++
	}
	nu := floorDiv(now, m.clock.unit)
	for _, slot := range m.sk.slots(h) {
		if old, live := m.sk.cell(m.clock, slot, nu); !live || old < tu {
			m.written[slot] = nu // the merge writes this cell
		}
	}
	m.sk.merge(m.clock, h, tat, now)
	for _, slot := range m.sk.slots(h) {
		m.shadow[slot] = max(m.shadow[slot], tu)
	}
	m.truth[h] = tat
}

// check asserts at now (the time of the last merge or later): every cell
// reads as its exact copy (live with the same time, or free), however often
// the 8-bit clock wrapped; no nonzero cell of a block read as current is old
// enough to be misread; the first row's count of live cells (for Stats and
// eviction) is that of a scan; and no key's estimate is earlier than its
// state.
func (m *sketchModel) check(now int64) {
	m.t.Helper()
	if m.sk != nil {
		nu := floorDiv(now, m.clock.unit)
		live := 0
		for i := range int(m.sk.width) {
			if _, ok := m.sk.cell(m.clock, i, nu); ok {
				live++
			}
		}
		if got, _ := m.sk.fill(m.clock, now); got != live {
			m.t.Fatalf("at %d: fill counts %d live cells, a scan %d", nu, got, live)
		}
		if got := m.sk.liveFraction(m.clock, now) * float64(m.sk.width); int(got) != live {
			m.t.Fatalf("at %d: live fraction counts %v cells, a scan %d", nu, got, live)
		}
		maxAge := int64(256 - int(m.clock.window))
		for i, v := range m.sk.cells {
			got, live := m.sk.cell(m.clock, i, nu)
			if want := m.shadow[i]; live != (want > nu) || live && got != want {
				m.t.Fatalf("at %d: cell %d reads %d (live %v), merged %d", nu, i, got, live, want)
			}
			if v != 0 && !m.clock.stale(m.sk.scrubs[i>>blockBits], nu) && nu-m.written[i] >= maxAge {
				m.t.Fatalf("at %d: cell %d unscrubbed for %d units", nu, i, nu-m.written[i])
			}
		}
	}
	for h, tat := range m.truth {
		if tat <= now {
			continue
		}
		if e := m.sk.estimate(m.clock, h, now); e < tat {
			m.t.Fatalf("at %d: key %x estimate %d earlier than its state %d", now, h, e, tat)
		}
	}
}

// The sketch over many wraps of its 8-bit clock: tau = 64ns makes a unit
// 1ns, so 256 units pass every 256ns of the time line.
func TestSketchNeverUnderestimates(t *testing.T) {
	for _, tau := range []int64{64, int64(time.Minute), 7} {
		rng := rand.New(rand.NewPCG(uint64(tau), 1))
		m := newSketchModel(t, tau, 1) // rows of 32 cells: many collisions
		unit := m.clock.unit
		ks := keys(rng, 200)
		now := int64(0)
		for i := range 100_000 {
			switch rng.IntN(100) {
			case 0: // a long pause, sometimes long enough to release the sketch
				now += rng.Int64N(2 * idleUnits * unit)
			case 1, 2, 3:
				now += rng.Int64N(idleUnits * unit)
			default:
				now += rng.Int64N(tau/8 + 1)
			}
			h := ks[rng.IntN(len(ks))]
			m.merge(h, now+1+rng.Int64N(tau), now)
			if i%97 == 0 {
				m.check(now)
			}
		}
		t.Logf("tau %d: %d wraps of the cell clock", tau, floorDiv(now, unit)>>8)
	}
}

// A sketch kept alive for many wraps of its clock by one key merged often
// enough, while the cells of every other key lie untouched: without the
// scrub and the stale blocks, those would read as live again after 256
// units. Rows of 280 cells: 4 blocks, of which the key touches at most 3.
func TestSketchScrubPreventsGhosts(t *testing.T) {
	for _, tau := range []int64{64, int64(time.Minute)} {
		rng := rand.New(rand.NewPCG(uint64(tau), 2))
		m := newSketchModel(t, tau, 10)
		unit := m.clock.unit
		now := int64(0)
		for _, h := range keys(rng, 100) {
			m.merge(h, now+tau, now)
		}
		keep := rng.Uint64()
		for i := range 25_000 {
			gap := rng.Int64N(2 * scrubAfter) // scrubs, and merges between them
			if i%10 == 0 {
				gap = rng.Int64N(idleUnits) // blocks going stale
			}
			now += gap * unit
			m.merge(keep, now+1+rng.Int64N(tau), now)
			m.check(now)
		}
		require.Greater(t, floorDiv(now, unit)>>8, int64(1000), "too few wraps")
	}
}

func FuzzSketchNeverUnderestimates(f *testing.F) {
	f.Add([]byte{1, 0, 0, 255, 2, 0, 16, 128, 1, 255, 255, 3})
	f.Add([]byte{0, 255, 255, 255, 0, 255, 255, 255, 0, 255, 255, 255})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const tau = 64 // unit 1ns
		m := newSketchModel(t, tau, 10)
		now := int64(0)
		for len(ops) >= 4 {
			// key (16 keys: heavy collisions), gap (up to a wrap of the
			// cell clock; 64 times that when ops[2] is odd, past the idle
			// limit), state offset.
			h := uint64(ops[0]%16) * 0x9e3779b97f4a7c15
			gap := int64(ops[1])
			if ops[2]&1 == 1 {
				gap *= 64
			}
			now += gap
			m.merge(h, now+1+int64(ops[3])*tau/256, now)
			m.check(now)
			ops = ops[4:]
		}
	})
}

// tableModel follows, for every key, the state an exact limiter reaches
// from the requests the table actually allowed: the table may deny more
// (collisions, rounding), never let a key be fuller than that.
type tableModel struct {
	t     testing.TB
	p     Policy
	tab   *Table
	truth map[uint64]int64
}

func (m *tableModel) do(kind int, h uint64, now, n int64, after time.Duration) {
	m.t.Helper()
	switch kind {
	case opTake:
		if m.tab.take(h, now, n).Allowed {
			var res result
			if m.truth[h], res = m.p.take(m.truth[h], now, n); !res.Allowed {
				m.t.Fatalf("at %d: key %x allowed %d tokens it does not have", now, h, n)
			}
		}
	case opRefund:
		m.tab.refund(h, now, n)
		m.truth[h], _ = m.p.refund(m.truth[h], now, n)
	case opPeek:
		m.tab.peek(h, now)
	case opReset:
		m.tab.Reset(h, now)
		delete(m.truth, h)
	case opMirror:
		exact := m.tab.holdsExactly(h)
		m.tab.Mirror(h, now, Fulls{after})
		reported := now + min(max(int64(after), 0), m.p.tau)
		// The store's word replaces an estimate; an exact state is replaced
		// only by a later one (answers may arrive out of order).
		if old := m.truth[h]; exact {
			reported = max(reported, old)
		}
		m.truth[h] = reported
		if got := m.tab.peek(h, now); got.ResetAfter < m.p.peek(reported, now).ResetAfter {
			m.t.Fatalf("at %d: key %x fuller than the store reported: %+v", now, h, got)
		}
	}
	got, want := m.tab.peek(h, now), m.p.peek(m.truth[h], now)
	if got.Remaining > want.Remaining || got.ResetAfter < want.ResetAfter {
		m.t.Fatalf("at %d: key %x fuller than its true state: table %+v, truth %+v", now, h, got, want)
	}
	if kind == opReset {
		// The caller's word is exact, sketch or not.
		if got != want {
			m.t.Fatalf("at %d: after set, table %+v, truth %+v", now, got, want)
		}
	}
}

const (
	opReset = iota + opPeek + 1
	opMirror
)

func FuzzTableNeverFullerThanTruth(f *testing.F) {
	f.Add(uint8(3), []byte{0, 1, 0, 0, 0, 2, 0, 0, 3, 3, 200, 0, 4, 4, 0, 1})
	f.Add(uint8(1), []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, burst uint8, ops []byte) {
		p := mustPolicy(t, 1+int(burst%8), time.Second)
		m := &tableModel{t: t, p: p, tab: NewTable(p, 4), truth: map[uint64]int64{}}
		now := int64(0)
		for len(ops) >= 4 {
			kind := int(ops[0] % 5)
			h := uint64(ops[1]%32) * 0x9e3779b97f4a7c15 // 32 keys, 4 exact buckets
			now += int64(binary.LittleEndian.Uint16(ops[2:4])) * int64(time.Millisecond) / 16
			n := 1 + int64(ops[1]>>5)%int64(p.Burst())
			m.do(kind, h, now, n, time.Duration(ops[3])*p.Interval()/32)
			ops = ops[4:]
		}
	})
}

func TestTableNeverFullerThanTruth(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	p := mustPolicy(t, 5, 100*time.Millisecond)
	m := &tableModel{t: t, p: p, tab: NewTable(p, 64), truth: map[uint64]int64{}}
	ks := keys(rng, 400)
	now := int64(0)
	for range 200_000 {
		now += rng.Int64N(int64(time.Millisecond))
		kind := opTake
		if rng.IntN(10) == 0 {
			kind = rng.IntN(5)
		}
		m.do(kind, ks[rng.IntN(len(ks))], now, 1+rng.Int64N(int64(p.Burst())), time.Duration(rng.Int64N(int64(time.Second))))
	}
	st := m.tab.Stats()
	require.Positive(t, st.Evictions)
	t.Logf("%+v", st)
}

// holdsExactly reports whether the table keeps h in its exact table.
func (t *Table) holdsExactly(h uint64) bool {
	h = key(h)
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ex.get(h)
	return ok
}

// A sketch's rows use what the allocator hands out: at least the cells asked
// for when small (rounded up to a size class), at most 8 KB fewer when
// large (rounded down to whole pages, none lost at the default cap), and a
// large one's bytes are a whole number of pages.
func TestSketchFillsItsAllocation(t *testing.T) {
	c := newSketchClock(int64(time.Minute))
	for _, shardCap := range []int{1, 125, 390, 391, 487, 4096, 40_000} {
		sk := newSketch(c, shardCap, 0)
		want := sketchRows * max(minSketchWidth, sketchWidthPerKey*shardCap)
		got := len(sk.cells)
		require.Equal(t, sketchRows*int(sk.width), got)
		if want <= largeObject {
			require.GreaterOrEqual(t, got, want, "cap %d", shardCap)
			require.LessOrEqual(t, got, want*9/8, "cap %d", shardCap)
		} else {
			require.LessOrEqual(t, got, want, "cap %d", shardCap)
			require.Greater(t, got, want-pageBytes, "cap %d", shardCap)
			require.Greater(t, got, cap(sk.cells)-sketchRows, "cap %d: bytes left unused", shardCap)
			require.Zero(t, cap(sk.cells)%pageBytes, "cap %d", shardCap)
		}
		require.Len(t, sk.scrubs, (got+blockCells-1)/blockCells)
	}
	require.Equal(t, sketchRows*sketchWidthPerKey*4096, len(newSketch(c, 4096, 0).cells), "the default cap loses cells")
}
