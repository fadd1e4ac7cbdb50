package counter

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestStripedIsExactUnderConcurrency(t *testing.T) {
	var c Striped
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10_000 {
				c.Inc()
			}
		})
	}
	wg.Wait()
	if got := c.Load(); got != 80_000 {
		t.Fatalf("Load = %d, want 80000", got)
	}
}

// lookups is the work between two increments in the "lookup" cases: one read
// of a small map, as a request does to find its route or its bucket.
var lookups = func() map[uint64]uint64 {
	m := make(map[uint64]uint64, 1024)
	for i := range uint64(1024) {
		m[i*0x9e3779b97f4a7c15] = i
	}
	return m
}()

var sink atomic.Uint64

// incOnTwoGoroutines increments, on exactly two goroutines, a Striped (from
// striped) or an atomic.Uint64 (from plain): the first of the pair from
// both, or with own each goroutine its own. With lookup, a map lookup comes
// between increments. Run it with -cpu 2, so that both run at once on two
// cores.
func incOnTwoGoroutines(b *testing.B, striped *[2]Striped, plain *[2]atomic.Uint64, lookup, own bool) {
	if runtime.GOMAXPROCS(0) != 2 {
		b.Skip("needs -cpu 2: two goroutines on two cores")
	}
	b.ReportAllocs()
	b.SetParallelism(1) // GOMAXPROCS × 1 = 2 goroutines
	var next atomic.Int32
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1) - 1)
		if !own {
			g = 0
		}
		var s *Striped
		var a *atomic.Uint64
		if striped != nil {
			s = &striped[g]
		} else {
			a = &plain[g]
		}
		k, i := uint64(0), uint64(g)
		for pb.Next() {
			if lookup {
				i++
				k += lookups[(i&1023)*0x9e3779b97f4a7c15]
			}
			if s != nil {
				s.Inc()
			} else {
				a.Add(1)
			}
		}
		sink.Add(k)
	})
}

// BenchmarkInc compares Striped with a bare atomic.Uint64 at two goroutines:
// "shared" increments one counter from both (the worst case for a single
// word), "shared-lookup" does a map lookup between increments (closer to a
// request), "neighbours" has each goroutine increment its own counter of two
// declared side by side, as the fields of a struct are.
//
//	go test -run '^$' -bench Inc -cpu 2 -count 8 ./internal/counter
func BenchmarkInc(b *testing.B) {
	cases := []struct {
		name        string
		lookup, own bool
	}{{"shared", false, false}, {"shared-lookup", true, false}, {"neighbours", false, true}}
	for _, c := range cases {
		b.Run("impl=Striped/case="+c.name, func(b *testing.B) {
			incOnTwoGoroutines(b, new([2]Striped), nil, c.lookup, c.own)
		})
		b.Run("impl=atomic.Uint64/case="+c.name, func(b *testing.B) {
			incOnTwoGoroutines(b, nil, new([2]atomic.Uint64), c.lookup, c.own)
		})
	}
}
