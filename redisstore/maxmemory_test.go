package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

// fillRedis fills c's Redis with application keys (2 MB) and then sets its
// maxmemory 512 kB below what it uses, so that under noeviction every
// command that may grow memory (SET, and so the script's write) fails with
// OOM, whatever the few kB connections add or free meanwhile.
func fillRedis(t testing.TB, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	value := strings.Repeat("x", 1024)
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 2048 {
			p.Set(ctx, "app:"+strconv.Itoa(i), value, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	used := usedMemory(t, c)
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-512<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "app:one-more", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET in the full Redis: %v, want an OOM error", err)
	}
}

// usedMemory returns used_memory from INFO memory.
func usedMemory(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory: %q", info)
	return 0
}

// A Redis at maxmemory under noeviction refuses the script's write with OOM:
// the whole node is out of memory, so that is an outage, not an answer about
// one key. The circuit opens after the breaker's threshold of failed round
// trips (no more script calls: the probe interval is an hour here), the
// failure policy decides every decision, and FailLocal holds one instance
// within 1.1× the budget. A client that Redis never saw makes 400 requests
// against 300/min and against 5/min.
func TestFullRedisIsAStoreFailure(t *testing.T) {
	srv := startServer(t, "--maxmemory-policy", "noeviction")
	c := srv.client(t)
	fillRedis(t, c)
	var calls counter
	c.AddHook(&calls)
	const requests, failures = 400, 3
	for _, fail := range []addrlimit.FailurePolicy{addrlimit.FailOpen, addrlimit.FailLocal} {
		for _, limit := range []int{300, 5} {
			t.Run(fmt.Sprintf("%v/limit=%d", fail, limit), func(t *testing.T) {
				s := newStore(t, c, redisstore.WithBreaker(failures, time.Hour))
				lim, err := addrlimit.New(limit, time.Minute, addrlimit.WithStore(s), addrlimit.WithStoreFailure(fail))
				if err != nil {
					t.Fatal(err)
				}
				// Loads the script: a Peek writes nothing, so a full Redis answers it.
				if _, err := s.Peek(context.Background(), "warm-up", addrlimit.Policy{Name: "default", Burst: 1, Interval: time.Second}); err != nil {
					t.Fatal(err)
				}
				sent := calls.n.Load()
				start := time.Now()
				var allowed, degraded int
				var last error
				for range requests {
					d := lim.AllowKey(context.Background(), "", "newcomer", 1)
					if !d.Denied() {
						allowed++
					}
					if d.Degraded {
						degraded++
					}
					last = d.Err
				}
				elapsed := time.Since(start)
				trips := calls.n.Load() - sent
				budget := float64(limit) * (1 + elapsed.Minutes())
				t.Logf("%d of %d allowed (budget %.1f), %d degraded, %d script calls, store errors %d, last error: %v",
					allowed, requests, budget, degraded, trips, lim.Stats().StoreErrors, last)
				if trips > failures || !errors.Is(last, redisstore.ErrCircuitOpen) || !strings.Contains(last.Error(), "OOM") {
					t.Errorf("%d script calls for %d decisions, last error %v; want at most %d and the circuit open on OOM",
						trips, requests, last, failures)
				}
				if degraded != requests {
					t.Errorf("%d of %d decisions degraded, want every one: the failure policy decides", degraded, requests)
				}
				if fail == addrlimit.FailLocal && float64(allowed) > 1.1*budget {
					t.Errorf("FailLocal allowed %d, more than 1.1× the budget of %.1f", allowed, budget)
				}
			})
		}
	}
}

// Once a full Redis has memory again, the probe closes the circuit and what
// FailLocal allowed meanwhile reaches Redis as the key's debt: the fleet's
// budget holds across the whole episode.
func TestFullRedisGetsTheDebtsOnceItHasMemory(t *testing.T) {
	srv := startServer(t, "--maxmemory-policy", "noeviction")
	c := srv.client(t)
	fillRedis(t, c)
	s := newStore(t, c, redisstore.WithBreaker(3, 20*time.Millisecond))
	lim, err := addrlimit.New(5, time.Hour, addrlimit.WithStore(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allowed := 0
	for range 10 {
		if d := lim.AllowKey(ctx, "", "client", 1); !d.Denied() {
			allowed++
		} else if !d.Degraded {
			t.Fatalf("undegraded decision in a full Redis: %+v", d)
		}
	}
	if allowed != 5 {
		t.Fatalf("FailLocal allowed %d of 10 in a full Redis, want the burst of 5", allowed)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second) // a hang detector: the probe runs every 20 ms
	for {
		if _, err := lim.Peek(ctx, "", "client"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the circuit did not close within 10 s of Redis having memory again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := lim.AllowKey(ctx, "", "client", 1)
	if d.Degraded || !d.Denied() || d.Remaining != 0 {
		t.Fatalf("first decision by Redis after the episode: %+v, want limited by Redis (the debt of 5 paid)", d)
	}
}
