package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A table of several limits decides each Take for all of them at once, and
// past its cap (evictions into each limit's sketch) it never lets a key
// through when an exact, unbounded model of every limit, charged what the
// table charged, would deny it: the table's guarantee holds for each limit.
// Below the cap the decisions are the model's exactly.
func TestSeveralLimitsNeverUnderLimit(t *testing.T) {
	short, _ := NewPolicy(3, 10*time.Millisecond)
	long, _ := NewPolicy(20, time.Second)
	for _, tc := range []struct {
		name    string
		maxKeys int
		keys    int
	}{{"below the cap", 4096, 1000}, {"past the cap", 64, 5000}} {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewTable(short, tc.maxKeys, long)
			model := map[uint64][2]int64{}
			rng := rand.New(rand.NewPCG(7, uint64(tc.keys)))
			now := int64(0)
			var allowed, over int
			for range 200_000 {
				now += rng.Int64N(int64(50 * time.Microsecond))
				h := 1 + rng.Uint64N(uint64(tc.keys))
				n := int64(1 + rng.IntN(3))
				st := model[h]
				n0, ok0 := short.Take(st[0], now, n)
				n1, ok1 := long.Take(st[1], now, n)
				want := ok0 && ok1
				got, _, _, _ := tab.Take(h, now, n)
				if got && !want {
					over++
				}
				if tc.maxKeys >= tc.keys && got != want {
					t.Fatalf("key %d cost %d at %v: allowed=%v, the model %v (short %v, long %v)", h, n, time.Duration(now), got, want, ok0, ok1)
				}
				if got {
					model[h] = [2]int64{n0, n1}
				}
				if got {
					allowed++
				}
			}
			if over > 0 {
				t.Fatalf("%d requests allowed that the exact model of every limit denies", over)
			}
			if allowed == 0 {
				t.Fatal("nothing allowed: the sequence says nothing")
			}
			t.Logf("%d allowed of 200000, %d evictions", allowed, tab.Stats().Evictions)
		})
	}
}
