package bucket

import "slices"

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
// Cells are single bytes, so that a key of capacity gets many of them
// (sketchRows x sketchWidthPerKey): what keeps newcomers from colliding
// with a flood in every row is the number of cells per flooding key, and a
// flood of keys that each spend a token or two compounds through
// collisions (a newcomer inherits its cells' minimum, spends, and is merged
// back that much later) unless most newcomers find a cell of their own: no
// update rule avoids this, as the cells must bound every key that was
// merged, so only the number of cells per flooding key does. At 64 cells
// per row per key of capacity, a flood of 128 times the capacity leaves two
// keys per cell, where keys of two requests each still leave 95% of
// newcomers at least one token (28 cells left 30%). A cell counts units of
// tau/64 (rounded up to whole nanoseconds) of the shard's time line, modulo
// 256; 0 means free. Times are rounded UP to a unit when merged, so
// rounding too only ever limits more (by less than burst/64 tokens per
// eviction). A value is read relative to now: with d = value - now (mod
// 256, in units), the cell is live when 1 <= d <= window, window = tau in
// units + 2, the most a merged TAT can lie ahead of now; otherwise the cell
// is free. This needs a now that never goes back, which the shard
// guarantees (it passes the latest time it has seen).
//
// Wrap-around: a reading is right as long as no nonzero cell is older than
// 256 - window units. Cells are grouped in blocks of blockCells, each with
// the time of its last scrub (an int64, which does not wrap). A merge into a
// block last scrubbed scrubAfter or more units ago first zeroes the block's
// free cells (or the whole block once it cannot hold a live cell any more,
// see stale); reads treat every cell of a stale block as free. So a nonzero
// cell was written after its block's last scrub or was live at it: its
// value lies within scrubAfter + window of that scrub, and the block is read
// only while it is at most scrubAfter + window units old, under
// 256 - window. Cost per merge: sketchRows cells, plus at most sketchRows
// blocks of blockCells bytes scrubbed, each at most once per scrubAfter.
// Reads cost sketchRows cells and block times.
type sketch struct {
	cells  []uint8 // sketchRows rows of width cells
	width  uint64
	scrubs []int64 // per block of blockCells cells: time of its last scrub, units
	// lastMerge is the time of the last merge and maxTAT the latest value
	// merged, in units: at or after maxTAT every cell is free.
	lastMerge int64
	maxTAT    int64
	// The first row's live cells, counted as merges write them so that
	// Stats and eviction need not scan the row: byValue[v] counts its cells
	// holding value v for a time after countedTo (units), and live is their
	// sum. Passing a unit zeroes its count (expire). Every cell counted
	// holds a time within window of countedTo, so a count never mixes
	// times 256 units apart.
	byValue   [256]int32
	live      int
	countedTo int64
}

const (
	sketchRows = 3
	// sketchWidthPerKey is the width of a row per key of shard capacity:
	// sketchRows x sketchWidthPerKey bytes per key (docs/memory.md).
	sketchWidthPerKey = 64
	minSketchWidth    = 32
	// unitsPerTau fixes the resolution: a unit is tau/64, so rounding costs
	// a returning key less than burst/64 tokens.
	unitsPerTau = 64
	blockBits   = 8
	blockCells  = 1 << blockBits
	scrubAfter  = unitsPerTau // units between scrubs of a block in use
	idleUnits   = 16 * unitsPerTau
	// The Go allocator rounds objects above largeObject bytes up to whole
	// pages of pageBytes.
	largeObject = 32 << 10
	pageBytes   = 8 << 10
)

// sketchClock converts the shard time line to sketch units for one policy.
type sketchClock struct {
	unit   int64 // nanoseconds per unit, >= 1
	window uint8 // live window, units
}

func newSketchClock(tau int64) sketchClock {
	unit := max(1, ceilDiv(tau, unitsPerTau))
	return sketchClock{unit: unit, window: uint8(ceilDiv(tau, unit) + 2)}
}

// stale reports whether a block last scrubbed at units scrub can hold no
// live cell at nu: every cell written since, less than scrubAfter after it
// (later merges scrub first), holds a time before nu, as does every cell
// that was live at the scrub.
func (c sketchClock) stale(scrub, nu int64) bool {
	return nu-scrub > scrubAfter+int64(c.window)
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
// used at now. Its cells fill their allocation: the allocator rounds a
// small one up to its size class (at most 12.5%), which the rows use, and
// a large one up to a multiple of 8 KB, so a large one is rounded down to
// that first (losing at most 8 KB of cells, and none at the default cap).
func newSketch(c sketchClock, shardCap int, now int64) *sketch {
	n := sketchRows * max(minSketchWidth, sketchWidthPerKey*shardCap)
	if n > largeObject {
		n &^= pageBytes - 1
	}
	cells := slices.Grow([]uint8(nil), n)
	w := cap(cells) / sketchRows
	cells = cells[:sketchRows*w]
	nu := floorDiv(now, c.unit)
	scrubs := make([]int64, (len(cells)+blockCells-1)/blockCells)
	for i := range scrubs {
		scrubs[i] = nu
	}
	return &sketch{cells: cells, width: uint64(w), scrubs: scrubs, lastMerge: nu, maxTAT: nu, countedTo: nu}
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
func (c sketchClock) live(v uint8, now int64) (int64, bool) {
	d := v - uint8(now)
	if v == 0 || d == 0 || d > c.window {
		return 0, false
	}
	return now + int64(d), true
}

// cell decodes cell i at nu, as free if its block is stale (looked up only
// for a cell that reads live).
func (sk *sketch) cell(c sketchClock, i int, nu int64) (int64, bool) {
	t, ok := c.live(sk.cells[i], nu)
	if ok && c.stale(sk.scrubs[i>>blockBits], nu) {
		return 0, false
	}
	return t, ok
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
		t, ok := sk.cell(c, slot, nu)
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
	sk.lastMerge = max(sk.lastMerge, nu)
	sk.expire(nu)
	tu := ceilDiv(tat, c.unit)
	if uint8(tu) == 0 {
		tu++ // 0 means free: one unit later is still conservative
	}
	for r, slot := range sk.slots(h) {
		sk.raise(c, r, slot, tu, nu)
	}
}

// raise makes cell slot of row r hold at least time tu (units, with
// uint8(tu) != 0) at nu, the time of a merge.
func (sk *sketch) raise(c sketchClock, r, slot int, tu, nu int64) {
	sk.scrub(c, slot>>blockBits, nu)
	old, ok := c.live(sk.cells[slot], nu)
	if ok && old >= tu {
		return
	}
	v := uint8(tu)
	sk.cells[slot] = v
	if r == 0 {
		if ok {
			sk.byValue[uint8(old)]--
			sk.live--
		}
		sk.byValue[v]++
		sk.live++
	}
	sk.maxTAT = max(sk.maxTAT, tu)
}

// expire drops from the first row's count the cells whose time has passed
// at nu (units), which never goes back.
func (sk *sketch) expire(nu int64) {
	if nu-sk.countedTo >= int64(len(sk.byValue)) {
		clear(sk.byValue[:])
		sk.live = 0
		sk.countedTo = nu
		return
	}
	for ; sk.countedTo < nu; sk.countedTo++ {
		v := uint8(sk.countedTo + 1)
		sk.live -= int(sk.byValue[v])
		sk.byValue[v] = 0
	}
}

// liveFraction returns the fraction of the first row's cells that are live
// at now, which is at least the time of the last merge.
func (sk *sketch) liveFraction(c sketchClock, now int64) float64 {
	sk.expire(floorDiv(now, c.unit))
	return float64(sk.live) / float64(sk.width)
}

// scrub prepares block b for a merge at nu: unless it was scrubbed less than
// scrubAfter ago, it zeroes its free cells (all of them if stale).
func (sk *sketch) scrub(c sketchClock, b int, nu int64) {
	last := sk.scrubs[b]
	if nu-last < scrubAfter {
		return
	}
	sk.scrubs[b] = nu
	block := sk.cells[b*blockCells : min((b+1)*blockCells, len(sk.cells))]
	if c.stale(last, nu) {
		clear(block)
		return
	}
	for i, v := range block {
		if _, ok := c.live(v, nu); !ok {
			block[i] = 0
		}
	}
}

// idle reports whether every cell is free at now and nothing was merged for
// idleUnits: the sketch can be dropped.
func (sk *sketch) idle(c sketchClock, now int64) bool {
	nu := floorDiv(now, c.unit)
	return nu >= sk.maxTAT && nu-sk.lastMerge >= idleUnits
}

// fill returns how many cells of the first row are live at now, which is
// at least the time of the last merge, and the row's width. It sums the
// counts of the window's values (see byValue): those hold times after
// countedTo, and none of them in (countedTo, now] once now is before
// maxTAT, as every time counted lies within window of countedTo.
func (sk *sketch) fill(c sketchClock, now int64) (live, width int) {
	nu := floorDiv(now, c.unit)
	if nu >= sk.maxTAT {
		return 0, int(sk.width)
	}
	for u := nu + 1; u <= nu+int64(c.window); u++ {
		live += int(sk.byValue[uint8(u)])
	}
	return live, int(sk.width)
}
