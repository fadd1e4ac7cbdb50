package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTake: decisions per second against a loopback Redis at 1, 16
// and 64 concurrent callers, with batching (the default) and without,
// under a policy of one limit and of three. redis-cpu-µs/decision is the
// CPU time Redis used per decision (INFO cpu), which the machine's load
// disturbs far less than decisions/s.
func BenchmarkTake(b *testing.B) {
	for _, limits := range []int{1, 3} {
		p := addrlimit.Policy{Name: "bench"}
		for i := range limits {
			p.Limits = append(p.Limits, addrlimit.Limit{Name: fmt.Sprint("l", i), Burst: 1 << (30 - i), Interval: time.Microsecond << i})
		}
		for _, batch := range []int{redisstore.DefaultMaxBatch, 1} {
			for _, callers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("limits=%d/batch=%d/callers=%d", limits, batch, callers), func(b *testing.B) {
					needRedis(b)
					c := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, PoolSize: 128})
					defer c.Close()
					s := newStore(b, c, redisstore.WithMaxBatch(batch))
					before := redisCPU(b, c)
					parallel(b, callers, func(i int) error {
						_, err := s.Take(context.Background(), "198.51.100."+strconv.Itoa(i%250), p, 1)
						return err
					})
					b.ReportMetric(float64(redisCPU(b, c)-before)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/decision")
				})
			}
		}
	}
}

// redisCPU returns the CPU time Redis has used (INFO cpu: user and
// system), which a loaded machine disturbs far less than wall times.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				secs, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += time.Duration(secs * float64(time.Second))
			}
		}
	}
	return total
}

// parallel runs f from callers goroutines (one: the benchmark's own) and
// reports decisions/s.
func parallel(b *testing.B, callers int, f func(i int) error) {
	b.ReportAllocs()
	if callers == 1 {
		for i := 0; b.Loop(); i++ {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(max(1, callers/runtimeProcs()))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkDecisionDuringOutage: Redis killed (connection refused), default
// store options (50 ms timeout, circuit open after 3 failures), FailLocal,
// 8 concurrent callers. The first second of the outage is not measured;
// after it, every decision's duration is, and p50/p99 are reported (the
// in-memory decision itself costs about a microsecond).
func BenchmarkDecisionDuringOutage(b *testing.B) {
	srv := startServer(b)
	s, err := redisstore.New(srv.client(b))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := addrlimit.New(100, time.Second, addrlimit.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	srv.stop()
	reqs := make([]*http.Request, 64)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("192.0.2.%d:1", i+1))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for start := time.Now(); time.Since(start) < time.Second; {
				lim.Allow(reqs[g])
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	var took []time.Duration
	var degraded atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for i := 0; pb.Next(); i++ {
			start := time.Now()
			d := lim.Allow(reqs[i%len(reqs)])
			mine = append(mine, time.Since(start))
			if d.Degraded {
				degraded.Add(1)
			}
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if degraded.Load() != int64(b.N) {
		b.Fatalf("%d of %d decisions degraded during the outage", degraded.Load(), b.N)
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}
