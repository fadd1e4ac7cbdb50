package addrlimit

import "testing"

// BenchmarkSlotTable is what an in-flight limit adds to a request in
// memory: a slot of a key seen before taken and released.
func BenchmarkSlotTable(b *testing.B) {
	t := newSlotTable(2, DefaultMaxKeys)
	const h = 0x9e3779b97f4a7c15
	b.ReportAllocs()
	for b.Loop() {
		c, _, ok := t.acquire(h)
		if !ok {
			b.Fatal("refused")
		}
		t.release(c)
	}
}

// TestSlotTableSweeps: keys whose requests ended leave at most twice the
// live keys plus slotSweepSlack entries (+1), however many keys came and
// went, and the counts stay exact.
func TestSlotTableSweeps(t *testing.T) {
	tab := newSlotTable(1, DefaultMaxKeys)
	const keys = 100_000
	hold := map[uint64]*slotCount{}
	for i := range uint64(keys) {
		h := i * 0x9e3779b97f4a7c15
		c, _, ok := tab.acquire(h)
		if !ok {
			t.Fatalf("key %d refused", i)
		}
		if i%100 == 0 {
			hold[h] = c // 1,000 keys keep their slot
			continue
		}
		tab.release(c)
		if got, bound := tab.entries.Load(), int64(2*(len(hold)+1)+2*slotSweepSlack+1); got > bound {
			t.Fatalf("after key %d: %d entries for %d live keys, bound %d", i, got, len(hold), bound)
		}
	}
	if held, live := tab.count(); held != len(hold) || live != len(hold) {
		t.Fatalf("count: %d held by %d keys, want %d", held, live, len(hold))
	}
	for _, c := range hold {
		tab.release(c)
	}
	if held, live := tab.count(); held != 0 || live != 0 {
		t.Fatalf("after release: %d held by %d keys", held, live)
	}
}

// TestSlotTableBound: at the bound a new key is refused, keys holding slots
// keep them, and a key freed by a release makes room after enough releases.
func TestSlotTableBound(t *testing.T) {
	const max = 64
	tab := newSlotTable(1, max)
	var held []*slotCount
	for i := range uint64(max) {
		c, _, ok := tab.acquire(i)
		if !ok {
			t.Fatalf("key %d of %d refused", i, max)
		}
		held = append(held, c)
	}
	if _, _, ok := tab.acquire(max); ok {
		t.Fatal("a key past the bound was admitted")
	}
	for i := range uint64(max) {
		if _, n, ok := tab.acquire(i); ok || n != 1 {
			t.Fatalf("key %d: got a second slot (%d held)", i, n)
		}
	}
	for _, c := range held[:max/2] {
		tab.release(c)
	}
	if _, _, ok := tab.acquire(max); !ok {
		t.Fatal("no room after half the keys went idle")
	}
	if got := tab.entries.Load(); got > max {
		t.Fatalf("%d entries, bound %d", got, max)
	}
}
