package bucket

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The exact table against a Go map: random sets and removals of a small key
// space (long probe runs, many wrap-arounds), every key checked each time.
func TestExactMatchesMap(t *testing.T) {
	for _, maxKeys := range []int{1, 2, 7, 64, 300} {
		rng := rand.New(rand.NewPCG(uint64(maxKeys), 3))
		ks := exactKeys(rng, 2*maxKeys+3)
		var e exact
		model := map[uint64]int64{}
		for step := range 5000 {
			h := ks[rng.IntN(len(ks))]
			if _, ok := model[h]; ok || len(model) < maxKeys {
				if rng.IntN(3) == 0 {
					e.remove(h)
					delete(model, h)
				} else {
					tat := rng.Int64()
					e.set(h, &[MaxLimits]int64{tat}, maxKeys)
					model[h] = tat
				}
			}
			require.Equal(t, len(model), e.n, "maxKeys %d step %d", maxKeys, step)
			for _, k := range ks {
				tat, ok := e.get(k)
				if want, wantOK := model[k]; ok != wantOK || tat != want {
					t.Fatalf("maxKeys %d step %d key %x: got %d %v, want %d %v", maxKeys, step, k, tat, ok, want, wantOK)
				}
			}
		}
		assert.LessOrEqual(t, len(e.slots), maxSlots(maxKeys), "maxKeys %d", maxKeys)
	}
}

func TestExactSampleSeesEveryKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	var e exact
	ks := exactKeys(rng, 100)
	for _, h := range ks {
		e.set(h, &[MaxLimits]int64{1}, 100)
	}
	seen := map[uint64]int{}
	e.sample(1000, func(_ int, s slot) bool { seen[s.key()]++; return true })
	assert.Len(t, seen, 100)
	for h, n := range seen {
		assert.Equal(t, 1, n, "key %x sampled twice", h)
	}
	n := 0
	e.sample(10, func(int, slot) bool { n++; return n < 3 })
	assert.Equal(t, 3, n, "sample did not stop when told")
}

// exactKeys returns n distinct keys as the exact table takes them: bit 0
// clear, never 0.
func exactKeys(rng *rand.Rand, n int) []uint64 {
	seen := make(map[uint64]bool, n)
	out := make([]uint64, 0, n)
	for len(out) < n {
		if h := rng.Uint64() &^ pinBit; h != 0 && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// Key 0 marks empty slots; the table maps hash 0 to hash 1's key (a
// collision).
func TestKeyZero(t *testing.T) {
	tab := NewTable(mustPolicy(t, 3, 1), 10)
	assert.Equal(t, 3, drain(tab, 0, 0))
	assert.False(t, tab.take(1, 0, 1).Allowed, "keys 0 and 1 share a bucket")
	assert.True(t, tab.take(2, 0, 1).Allowed)
	assert.Equal(t, 2, tab.Stats().Keys)
}

// Pin marks survive moves (growth, backward-shift deletion) and are counted.
func TestExactPins(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	var e exact
	ks := exactKeys(rng, 300)
	for i, h := range ks {
		e.set(h, &[MaxLimits]int64{int64(i)}, 300)
		e.pin(h, i%3 == 0)
	}
	require.Equal(t, 100, e.pins)
	for i, h := range ks[:150] {
		if i%2 == 0 {
			e.remove(h)
		}
	}
	pins := 0
	for i, h := range ks {
		j, ok := e.find(h)
		require.Equal(t, i >= 150 || i%2 == 1, ok, "key %d", i)
		if ok {
			require.Equal(t, i%3 == 0, e.slots[j].isPinned(), "key %d", i)
			require.Equal(t, int64(i), e.slots[j].tat)
			if i%3 == 0 {
				pins++
			}
		}
	}
	assert.Equal(t, pins, e.pins)
	e.pin(ks[0], false) // removed: nothing to do
	e.pin(ks[3], false)
	e.pin(ks[3], false)
	assert.Equal(t, pins-1, e.pins)
}
