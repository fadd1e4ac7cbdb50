package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// startRedis starts a redis-server on a free loopback port for one
// benchmark and kills it when the benchmark ends. Outside CI, a machine
// without redis-server skips the fleet benchmarks.
func startRedis(b *testing.B) string {
	b.Helper()
	addr, stop, err := StartRedis(b.TempDir())
	switch {
	case errors.Is(err, ErrNoRedis) && os.Getenv("CI") != "true":
		b.Skip(err)
	case err != nil:
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return addr
}

// fleetContenders decide one request for a key against Redis, each with
// a limit that never runs out, so that every decision is a full one.
var fleetContenders = []struct {
	name string
	new  func(c *redis.Client) (func(ctx context.Context, key string) error, error)
}{
	{"redis_rate", func(c *redis.Client) (func(context.Context, string) error, error) {
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: 1 << 30, Burst: 1 << 30, Period: time.Hour}
		return func(ctx context.Context, key string) error {
			_, err := l.Allow(ctx, "rr:"+key, limit)
			return err
		}, nil
	}},
	{"redisstore", redisstoreContender()},
	{"redisstore-nobatch", redisstoreContender(redisstore.WithMaxBatch(1))},
}

// fleetTimeout replaces redisstore's 50 ms default, which a saturated
// 2-core machine exceeds now and then (redis_rate has no timeout at all):
// a timed-out call would end the benchmark.
var fleetTimeout = redisstore.WithTimeout(5 * time.Second)

func redisstoreContender(opts ...redisstore.Option) func(c *redis.Client) (func(context.Context, string) error, error) {
	return func(c *redis.Client) (func(context.Context, string) error, error) {
		s, err := redisstore.New(c, append([]redisstore.Option{fleetTimeout}, opts...)...)
		if err != nil {
			return nil, err
		}
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1 << 30, Interval: time.Microsecond}}}
		return func(ctx context.Context, key string) error {
			_, err := s.Take(ctx, key, p, 1)
			return err
		}, nil
	}
}

// BenchmarkFleet: decisions per second against one loopback Redis, at 1,
// 16 and 64 concurrent callers, for go-redis/redis_rate v10 and redisstore
// (batching concurrent calls, and without batching). Every contender uses
// go-redis with the same pool; keys cycle over 250 client addresses.
func BenchmarkFleet(b *testing.B) {
	addr := startRedis(b)
	for _, callers := range []int{1, 16, 64} {
		for _, fc := range fleetContenders {
			b.Run(fmt.Sprintf("lib=%s/callers=%d", fc.name, callers), func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 128})
				defer c.Close()
				decide, err := fc.new(c)
				if err != nil {
					b.Fatal(err)
				}
				fleetRun(b, callers, decide)
			})
		}
	}
}

func fleetRun(b *testing.B, callers int, decide func(context.Context, string) error) {
	keys := make([]string, 250)
	for i := range keys {
		keys[i] = "198.51.100." + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	if callers == 1 {
		for i := 0; b.Loop(); i++ {
			if err := decide(ctx, keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				if err := decide(ctx, keys[i%len(keys)]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
