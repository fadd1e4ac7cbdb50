package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// benchKeys returns the hashes the benchmarks cycle through, made once, and
// only when a benchmark runs.
var benchKeys = sync.OnceValue(func() []uint64 { return keys(rand.New(rand.NewPCG(1, 1)), 1<<20) })

// BenchmarkTakeAllowed: the allowed path of a key already in the table, one
// key and 10,000 keys, with a budget that never runs out.
func BenchmarkTakeAllowed(b *testing.B) {
	p := mustPolicy(b, 1<<30, time.Nanosecond)
	for _, n := range []int{1, 10_000} {
		b.Run(map[int]string{1: "keys=1", 10_000: "keys=10k"}[n], func(b *testing.B) {
			ks := benchKeys()
			tab := NewTable(p, 1<<20)
			now, i := int64(0), 0
			for b.Loop() {
				now++
				if ok, _, _, _ := tab.Take(ks[i], now, 1); !ok {
					b.Fatal("denied")
				}
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// BenchmarkTakeNewKeyWhenFull: every request comes from a key the table has
// never seen while the table is at its cap (target: <= 5µs). The
// flood either spends one token per key (victims go to the sketch) or
// drains each key first (so its first request also reads a sketch crowded
// with drained cells). Keys never repeat within a run of 1M.
func BenchmarkTakeNewKeyWhenFull(b *testing.B) {
	p := mustPolicy(b, 5, 12*time.Second) // 5 per minute
	for _, maxKeys := range []int{100_000, 1 << 20} {
		name := map[int]string{100_000: "maxKeys=100k", 1 << 20: "maxKeys=1M"}[maxKeys]
		b.Run(name, func(b *testing.B) {
			tab := NewTable(p, maxKeys)
			rng := rand.New(rand.NewPCG(2, 2))
			now := int64(0)
			for range maxKeys {
				tab.Take(rng.Uint64(), now, 1)
			}
			b.ResetTimer()
			for b.Loop() {
				now += 1000 // 1µs between requests
				tab.Take(rng.Uint64(), now, 1)
			}
			st := tab.Stats()
			b.ReportMetric(float64(st.Evictions)/float64(b.N), "evictions/op")
		})
	}
}

// BenchmarkTakeReturningAbuser: a drained key evicted long ago comes back
// and is denied from the sketch's estimate.
func BenchmarkTakeReturningAbuser(b *testing.B) {
	p := mustPolicy(b, 5, 12*time.Second)
	tab := NewTable(p, 100_000)
	ks := benchKeys()
	for _, h := range ks[:200_000] {
		for ok := true; ok; ok, _, _, _ = tab.Take(h, 0, 1) {
		}
	}
	i := 0
	for b.Loop() {
		if i++; i == 100_000 {
			i = 0
		}
		tab.Take(ks[i], 1, 1)
	}
}

// BenchmarkStatsDuringFlood: Stats of a table at 1<<20 keys (the root
// package's DefaultMaxKeys) full and evicting, while another goroutine
// floods it with new keys (target <= 1ms; it took 27-45ms when it scanned
// a sketch row per shard).
func BenchmarkStatsDuringFlood(b *testing.B) {
	p := mustPolicy(b, 5, 12*time.Second)
	tab := NewTable(p, 1<<20)
	rng := rand.New(rand.NewPCG(3, 3))
	now := int64(0)
	for range 2 << 20 {
		now += 100
		tab.Take(rng.Uint64(), now, 1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(4, 4))
		for t := now; ; {
			select {
			case <-stop:
				return
			default:
			}
			t += 100
			tab.Take(rng.Uint64(), t, 1)
		}
	})
	for b.Loop() {
		if tab.Stats().ApproxKeys == 0 {
			b.Fatal("no approximate memory")
		}
	}
	close(stop)
	wg.Wait()
}

// BenchmarkTakeLimits: an admitted Take on one hot key of a table of one
// limit and of three (the root's BenchmarkLimits shapes), what the table
// adds per limit.
func BenchmarkTakeLimits(b *testing.B) {
	second := mustPolicy(b, 1_000_000_000, time.Nanosecond)
	minute := mustPolicy(b, 1_000_000_000, 60*time.Nanosecond)
	hour := mustPolicy(b, 1_000_000_000, 3600*time.Nanosecond)
	for _, more := range [][]Policy{nil, {minute, hour}} {
		b.Run(fmt.Sprintf("limits=%d", 1+len(more)), func(b *testing.B) {
			tab := NewTable(second, 1<<10, more...)
			now := int64(time.Hour)
			var f Fulls
			for b.Loop() {
				now += 300
				if ok, _, _ := tab.TakeTo(1, now, 1, &f); !ok {
					b.Fatal("denied")
				}
			}
		})
	}
}
