package bucket

import "math/bits"

// The approximate memory of a full shard: a count-min-style sketch of GCRA
// times (Cormode & Muthukrishnan 2005, with the max-merge of conservative
// update). It has sketchRows rows of width cells; a key maps to one cell per
// row. Evicting a bucket merges its TAT into the key's cells, each keeping the
// LATEST time merged into it; a key's estimate is the earliest of its cells.
// Every cell of a key holds a time at least as late as the key's own, so the
// estimate is never earlier than the key's true state: a key that comes back
// gets at most the tokens it had, and a key never seen gets at most a full
// bucket. Collisions only make estimates later (more limiting).
//
// Cells are uint32 counts of units (unit = tau/2^16, rounded up to whole
// nanoseconds) of the shard's time line, modulo 2^32; 0 means free. Times are
// rounded UP to a unit when merged, so rounding too only ever limits more.
// A value is read relative to now: with d = value - now (mod 2^32, in units),
// the cell is live when 1 <= d <= window, where window = 2*(tau in units + 1)
// (twice what a TAT can reach, so that callers whose now is slightly older
// than the merge's still read it live); otherwise the cell is free.
//
// Wrap-around: such a reading is right as long as the value was written less
// than 2^32 - window units ago. Three rules make sure no cell gets that old:
//   - every merge first scrubs cells at a cursor (zeroes the free ones) at a
//     rate proportional to elapsed time, a full pass per scrubPeriod units;
//   - a sketch whose cells are all free and which has not been merged into
//     for idleUnits units is released (and allocated afresh when next
//     needed), so scrubbing never falls more than idleUnits behind;
//   - a cell live at one scrub is free at the next.
//
// Hence a nonzero cell is at most window + 2*(scrubPeriod+idleUnits) < 2^31.1
// units old, far below 2^32 - window. Cost per merge: sketchRows cells plus
// len(cells)*elapsed/scrubPeriod scrubbed cells, at most len(cells)/1024 when
// merges are idleUnits apart and well under one cell per merge under a flood.
type sketch struct {
	cells []uint32 // sketchRows rows of width cells
	width uint64
	// scrub state: next cell to scrub, time of the last merge (units) and the
	// fraction of a cell owed by time already elapsed, in 2^-30 cells.
	cursor    int
	lastMerge int64
	owed      uint64
	maxTAT    int64 // latest value merged, in units: at or after it every cell is free
}

const (
	sketchRows = 4
	// sketchWidthPerKey is the width of a row per key of shard capacity.
	sketchWidthPerKey = 4
	minSketchWidth    = 32
	// unitsPerTau fixes the resolution: a unit is tau/2^16, so rounding costs
	// a returning key at most burst/65536 tokens.
	unitsPerTau = 1 << 16
	scrubPeriod = 1 << 30          // units per full scrub pass (about 2^14 tau)
	idleUnits   = 16 * unitsPerTau // about 16 tau
)

// sketchClock converts the shard time line to sketch units for one policy.
type sketchClock struct {
	unit   int64  // nanoseconds per unit, >= 1
	window uint32 // live window, units
}

func newSketchClock(tau int64) sketchClock {
	unit := max(1, ceilDiv(tau, unitsPerTau))
	return sketchClock{unit: unit, window: uint32(2 * (ceilDiv(tau, unit) + 1))}
}

// floorDiv and ceilDiv divide by a positive d, rounding toward minus and plus
// infinity; times may be negative on a caller's time line.
func floorDiv(x, d int64) int64 {
	q := x / d
	if x%d != 0 && x < 0 {
		q--
	}
	return q
}

func ceilDiv(x, d int64) int64 { return -floorDiv(-x, d) }

// newSketch returns an empty sketch for a shard of capacity shardCap, first
// used at now.
func newSketch(c sketchClock, shardCap int, now int64) *sketch {
	w := max(minSketchWidth, sketchWidthPerKey*shardCap)
	nu := floorDiv(now, c.unit)
	return &sketch{cells: make([]uint32, sketchRows*w), width: uint64(w), lastMerge: nu, maxTAT: nu}
}

// slots returns the index of h's cell in each row. h is a keyed hash already;
// it is remixed because the shard index was taken from its bits, and split
// into two halves for double hashing (Kirsch & Mitzenmacher 2006).
func (sk *sketch) slots(h uint64) [sketchRows]int {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	h1, h2 := uint32(h), uint32(h>>32)|1
	var s [sketchRows]int
	for r := range s {
		s[r] = r*int(sk.width) + int((uint64(h1+uint32(r)*h2)*sk.width)>>32)
	}
	return s
}

// live decodes cell value v at now (in units): its time in units and true,
// or false when the cell is free.
func (c sketchClock) live(v uint32, now int64) (int64, bool) {
	d := v - uint32(now)
	if v == 0 || d == 0 || d > c.window {
		return 0, false
	}
	return now + int64(d), true
}

// estimate returns the earliest time (ns) among h's cells, never earlier
// than the TAT last merged for h; a value <= now means a full bucket.
func (sk *sketch) estimate(c sketchClock, h uint64, now int64) int64 {
	nu := floorDiv(now, c.unit)
	if nu >= sk.maxTAT {
		return 0
	}
	est := int64(0)
	for i, slot := range sk.slots(h) {
		t, ok := c.live(sk.cells[slot], nu)
		if !ok {
			return 0
		}
		if i == 0 || t < est {
			est = t
		}
	}
	return est * c.unit
}

// merge records that h's bucket has state tat (> now): each of h's cells
// keeps the later of its time and tat rounded up to a unit.
func (sk *sketch) merge(c sketchClock, h uint64, tat, now int64) {
	nu := floorDiv(now, c.unit)
	sk.scrub(c, nu)
	tu := ceilDiv(tat, c.unit)
	v := uint32(tu)
	if v == 0 {
		v, tu = 1, tu+1 // 0 means free: one unit later is still conservative
	}
	for _, slot := range sk.slots(h) {
		old, ok := c.live(sk.cells[slot], nu)
		if !ok || old < tu {
			sk.cells[slot] = v
		}
	}
	sk.maxTAT = max(sk.maxTAT, tu)
}

// scrub zeroes the free cells among those owed since the last merge.
func (sk *sketch) scrub(c sketchClock, nu int64) {
	elapsed := uint64(min(max(nu-sk.lastMerge, 0), 1<<31))
	sk.lastMerge = max(sk.lastMerge, nu)
	hi, lo := bits.Mul64(elapsed, uint64(len(sk.cells)))
	lo, carry := bits.Add64(lo, sk.owed, 0)
	hi += carry
	n := hi<<34 | lo>>30
	sk.owed = lo & (scrubPeriod - 1)
	for range min(n, uint64(len(sk.cells))) {
		if _, ok := c.live(sk.cells[sk.cursor], nu); !ok {
			sk.cells[sk.cursor] = 0
		}
		if sk.cursor++; sk.cursor == len(sk.cells) {
			sk.cursor = 0
		}
	}
}

// idle reports whether every cell is free at now and nothing was merged for
// idleUnits: the sketch can be dropped.
func (sk *sketch) idle(c sketchClock, now int64) bool {
	nu := floorDiv(now, c.unit)
	return nu >= sk.maxTAT && nu-sk.lastMerge >= idleUnits
}

// fill returns how many cells of the first row are live at now, and the
// row's width.
func (sk *sketch) fill(c sketchClock, now int64) (live, width int) {
	nu := floorDiv(now, c.unit)
	if nu >= sk.maxTAT {
		return 0, int(sk.width)
	}
	for _, v := range sk.cells[:sk.width] {
		if _, ok := c.live(v, nu); ok {
			live++
		}
	}
	return live, int(sk.width)
}
