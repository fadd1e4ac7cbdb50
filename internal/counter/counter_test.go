package counter

import (
	"sync"
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

func BenchmarkInc(b *testing.B) {
	var c Striped
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}
