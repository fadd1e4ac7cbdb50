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
		ks := keys(rng, 2*maxKeys+3)
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
					e.set(h, tat, maxKeys)
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
	ks := keys(rng, 100)
	for _, h := range ks {
		e.set(h, 1, 100)
	}
	seen := map[uint64]int{}
	e.sample(1000, func(h uint64, _ int64) bool { seen[h]++; return true })
	assert.Len(t, seen, 100)
	for h, n := range seen {
		assert.Equal(t, 1, n, "key %x sampled twice", h)
	}
	n := 0
	e.sample(10, func(uint64, int64) bool { n++; return n < 3 })
	assert.Equal(t, 3, n, "sample did not stop when told")
}

// Key 0 marks empty slots; the table maps it to 1 (a collision).
func TestKeyZero(t *testing.T) {
	tab := NewTable(mustPolicy(t, 3, 1), 10)
	assert.Equal(t, 3, drain(tab, 0, 0))
	assert.False(t, tab.take(1, 0, 1).Allowed, "keys 0 and 1 share a bucket")
	assert.Equal(t, 1, tab.Stats().Keys)
}
