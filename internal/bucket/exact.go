package bucket

import (
	"math/bits"
	"math/rand/v2"
)

// exact is a shard's table of exact buckets: an open-addressing hash table
// with linear probing and backward-shift deletion (Knuth, TAOCP 6.4,
// Algorithm R), so it has no tombstones and its memory does not creep under
// churn, unlike a Go map, which grows to twice its size when keys are
// replaced continuously. It grows by doubling from 8 slots up to
// maxKeys*5/4 slots (16 bytes each: 20 bytes per key of capacity at most)
// and never shrinks. A slot with h == 0 is empty. Keys have bit 0 clear and
// are never 0: bit 0 of a slot's h is its pin mark (see pin), so a key is
// h &^ pinBit.
//
// A table of several limits keeps the states of the limits after the first
// in more.tats, more.stride of them per slot (slot i's at
// tats[i*stride:]), moved with their slot: 8 bytes per limit per slot more.
type exact struct {
	slots []slot
	more  *multiShard // nil in a table of one limit
	n     int         // occupied slots
	pins  int         // occupied slots with the pin mark
}

type slot struct {
	h   uint64
	tat int64
}

// pinBit marks a pinned slot in its h.
const pinBit = 1

func (s slot) key() uint64    { return s.h &^ pinBit }
func (s slot) isPinned() bool { return s.h&pinBit != 0 }

const minSlots = 8

// maxSlots is the table size for a capacity of maxKeys: a load of at most
// 0.8, and always one empty slot to end probes.
func maxSlots(maxKeys int) int { return maxKeys + maxKeys/4 + 1 }

// home is h's first probe. The high bits of a product spread h over any
// table size (Lemire's fast range); the odd multiplier remixes the bits the
// shard index came from.
func (e *exact) home(h uint64) int {
	hi, _ := bits.Mul64(h*0x9e3779b97f4a7c15, uint64(len(e.slots)))
	return int(hi)
}

// find returns the index of h's slot and true, or the index of the empty
// slot where h would go and false.
func (e *exact) find(h uint64) (int, bool) {
	if len(e.slots) == 0 {
		return 0, false
	}
	i := e.home(h)
	for {
		switch e.slots[i].key() {
		case h:
			return i, true
		case 0:
			return i, false
		}
		if i++; i == len(e.slots) {
			i = 0
		}
	}
}

func (e *exact) get(h uint64) (int64, bool) {
	if i, ok := e.find(h); ok {
		return e.slots[i].tat, true
	}
	return 0, false
}

// set stores the states tats (one per limit) for h, which must be present
// or fit (n < maxKeys).
func (e *exact) set(h uint64, tats *[MaxLimits]int64, maxKeys int) {
	i, ok := e.find(h)
	if !ok {
		if limit := maxSlots(maxKeys); len(e.slots) < limit && (e.n+1)*4 > len(e.slots)*3 {
			e.grow(min(max(2*len(e.slots), minSlots), limit))
			i, _ = e.find(h)
		}
		e.slots[i].h = h
		e.n++
	}
	e.slots[i].tat = tats[0]
	copy(e.tats(i), tats[1:])
}

// tats returns the states of the limits after the first of slot i.
func (e *exact) tats(i int) []int64 {
	if e.more == nil {
		return nil
	}
	m := e.more
	return m.tats[i*m.stride : (i+1)*m.stride]
}

// states copies the states of slot i into tats.
func (e *exact) states(i int, tats *[MaxLimits]int64) {
	tats[0] = e.slots[i].tat
	copy(tats[1:], e.tats(i))
}

// move moves slot j into slot i.
func (e *exact) move(i, j int) {
	e.slots[i] = e.slots[j]
	copy(e.tats(i), e.tats(j))
}

func (e *exact) grow(size int) {
	old := e.slots
	var oldTats []int64
	e.slots = make([]slot, size)
	if m := e.more; m != nil {
		oldTats, m.tats = m.tats, make([]int64, size*m.stride)
	}
	for j, s := range old {
		if s.h != 0 {
			i, _ := e.find(s.key())
			e.slots[i] = s
			if m := e.more; m != nil {
				copy(e.tats(i), oldTats[j*m.stride:(j+1)*m.stride])
			}
		}
	}
}

// remove deletes h if present, moving back the entries of its probe run
// that would otherwise become unreachable.
func (e *exact) remove(h uint64) {
	i, ok := e.find(h)
	if !ok {
		return
	}
	e.n--
	if e.slots[i].isPinned() {
		e.pins--
	}
	for j := i; ; {
		if j++; j == len(e.slots) {
			j = 0
		}
		if e.slots[j].h == 0 {
			break
		}
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		k := e.home(e.slots[j].key())
		if i <= j && (k <= i || k > j) || i > j && k <= i && k > j {
			e.move(i, j)
			i = j
		}
	}
	e.slots[i] = slot{}
}

// pin sets or clears the pin mark of h's slot, if h is present.
func (e *exact) pin(h uint64, on bool) {
	i, ok := e.find(h)
	if !ok || e.slots[i].isPinned() == on {
		return
	}
	e.slots[i].h ^= pinBit
	if on {
		e.pins++
	} else {
		e.pins--
	}
}

// sample calls f for up to n occupied slots (with their indexes),
// consecutive from a random position, until f returns false.
func (e *exact) sample(n int, f func(i int, s slot) bool) {
	if e.n == 0 {
		return
	}
	i := rand.IntN(len(e.slots))
	for range len(e.slots) {
		if s := e.slots[i]; s.h != 0 {
			if !f(i, s) {
				return
			}
			if n--; n == 0 {
				return
			}
		}
		if i++; i == len(e.slots) {
			i = 0
		}
	}
}
