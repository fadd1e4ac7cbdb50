package addrlimit

import "testing"

// BenchmarkSlotTable is what an in-flight limit adds to a request in
// memory: a slot taken and released, one key.
func BenchmarkSlotTable(b *testing.B) {
	t := newSlotTable(2, DefaultMaxKeys)
	const h = 0x9e3779b97f4a7c15
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := t.acquire(h); !ok {
			b.Fatal("refused")
		}
		t.release(h)
	}
}

// TestSlotTableSweeps: keys whose requests ended leave at most
// twice the live keys plus slotSweepSlack entries (+1, the key being
// added) per shard, however many keys came and went.
func TestSlotTableSweeps(t *testing.T) {
	tab := newSlotTable(1, DefaultMaxKeys)
	const keys = 100_000
	hold := map[uint64]bool{}
	for i := range uint64(keys) {
		h := i * 0x9e3779b97f4a7c15
		if _, ok := tab.acquire(h); !ok {
			t.Fatalf("key %d refused", i)
		}
		if i%100 == 0 {
			hold[h] = true // 1,000 keys keep their slot
			continue
		}
		tab.release(h)
	}
	for i := range tab.shards {
		sh := &tab.shards[i]
		if got, bound := len(sh.held), 2*sh.live+slotSweepSlack+1; got > bound {
			t.Fatalf("shard %d: %d entries for %d live keys, bound %d", i, got, sh.live, bound)
		}
	}
	if held, live := tab.count(); held != len(hold) || live != len(hold) {
		t.Fatalf("count: %d held by %d keys, want %d", held, live, len(hold))
	}
	for h := range hold {
		tab.release(h)
	}
	if held, live := tab.count(); held != 0 || live != 0 {
		t.Fatalf("after release: %d held by %d keys", held, live)
	}
}
