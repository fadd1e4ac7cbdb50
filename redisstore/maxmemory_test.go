package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
				if _, err := s.Peek(context.Background(), "warm-up", addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}); err != nil {
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

// New refuses a Redis whose maxmemory-policy may evict buckets, with an
// error that names the policy and the way out, unless WithEvictionAccepted;
// it accepts noeviction, volatile-ttl, any policy without a maxmemory, and a
// Redis that does not let it read its configuration.
func TestNewRefusesAnEvictingRedis(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		maxmemory, policy string
		refused           bool
	}{
		{"100mb", "allkeys-lru", true},
		{"100mb", "volatile-lru", true},
		{"100mb", "allkeys-lfu", true},
		{"100mb", "volatile-random", true},
		{"100mb", "volatile-ttl", false},
		{"100mb", "noeviction", false},
		{"0", "allkeys-lru", false},
	} {
		t.Run(tc.maxmemory+"/"+tc.policy, func(t *testing.T) {
			if err := c.ConfigSet(ctx, "maxmemory", tc.maxmemory).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := redisstore.New(c, redisstore.WithTimeout(testTimeout)) // the check's bound: far above a loaded machine's round trip
			t.Log(err)
			switch {
			case !tc.refused && err != nil:
				t.Fatalf("New: %v, want a store", err)
			case tc.refused && (err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") ||
				!strings.Contains(err.Error(), tc.policy) || !strings.Contains(err.Error(), srv.addr()) ||
				!strings.Contains(err.Error(), "WithEvictionAccepted")):
				t.Fatalf("New: %v, want an error naming the node, the policy and WithEvictionAccepted", err)
			}
			if _, err := redisstore.New(c, redisstore.WithTimeout(testTimeout), redisstore.WithEvictionAccepted()); err != nil {
				t.Fatalf("New with WithEvictionAccepted: %v", err)
			}
		})
	}
	t.Run("CONFIG renamed", func(t *testing.T) {
		srv := startServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
		if _, err := redisstore.New(srv.client(t)); err != nil {
			t.Fatalf("New on a Redis that refuses CONFIG: %v, want a store (nothing to check)", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		srv := startServer(t)
		srv.stop()
		if _, err := redisstore.New(srv.client(t)); err != nil {
			t.Fatalf("New with Redis down: %v, want a store (the failure policy decides later)", err)
		}
	})
}

// In a Cluster, New checks every master and names the ones that evict.
func TestNewChecksEveryClusterMaster(t *testing.T) {
	nodes := startCluster(t)
	if err := nodes[1].client(t).ConfigSet(context.Background(), "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].client(t).ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := redisstore.New(clusterClient(t, nodes), redisstore.WithTimeout(testTimeout))
	if err == nil || !strings.Contains(err.Error(), nodes[1].addr()) || strings.Contains(err.Error(), nodes[0].addr()) ||
		strings.Contains(err.Error(), nodes[2].addr()) {
		t.Fatalf("New on a Cluster with one volatile-lru master: %v, want an error naming that master only", err)
	}
	if _, err := redisstore.New(clusterClient(t, nodes), redisstore.WithEvictionAccepted()); err != nil {
		t.Fatalf("New with WithEvictionAccepted: %v", err)
	}
}

// What one bucket costs Redis (INFO memory, used_memory): the key of a
// client's IPv6 /64 under the default prefix and a policy named "default",
// its integer value and its expiry. docs/redis.md quotes it.
func TestBucketMemory(t *testing.T) {
	for _, p := range []addrlimit.Policy{
		{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: 6 * time.Minute}}}, // 10/hour
		{Name: "default", Limits: []addrlimit.Limit{ // and 100/day and 1,000/week: one key too
			{Burst: 10, Interval: 6 * time.Minute}, {Burst: 100, Interval: 24 * time.Hour / 100}, {Burst: 1000, Interval: 7 * 24 * time.Hour / 1000}}},
	} {
		t.Run(fmt.Sprintf("limits=%d", len(p.Limits)), func(t *testing.T) { bucketMemory(t, p) })
	}
}

func bucketMemory(t *testing.T, p addrlimit.Policy) {
	srv := startServer(t)
	c := srv.client(t)
	s, err := redisstore.New(c, redisstore.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Peek(ctx, "warm-up", p); err != nil { // loads the script
		t.Fatal(err)
	}
	const buckets, workers = 100_000, 128
	before := usedMemory(t, c)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < buckets; i += workers {
				// A /64 as AddrKey writes it, every group four hex digits.
				key := fmt.Sprintf("2001:%04x:%04x:%04x::/64", 0x1000+i>>24, 0x1000+i>>12&0xfff, 0x1000+i&0xfff)
				if _, err := s.Take(ctx, key, p, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := c.DBSize(ctx).Val(); n != buckets {
		t.Fatalf("%d keys in Redis, want %d, one per client", n, buckets)
	}
	per := float64(usedMemory(t, c)-before) / buckets
	t.Logf("%.0f B per client (%d clients, key %q)", per, buckets, s.RedisKey("2001:1000:1000:1000::/64", p))
	// One limit: docs/redis.md says 166–190 B. Three: one key
	// with a longer name and value (246 B), well below three buckets.
	if bound := 250 + 25*float64(len(p.Limits)-1); per > bound {
		t.Fatalf("%.0f B per client, want at most %.0f", per, bound)
	}
}

// Under volatile-ttl a full Redis evicts the buckets nearest to full first:
// a flood of one-token buckets (each one refill interval from full) is
// evicted, and a drained client's bucket (a whole burst from full) stays,
// so the client stays limited. docs/redis.md recommends it for that reason;
// volatile-lru, run the same way, is logged for contrast.
func TestVolatileTTLEvictsTheFloodNotTheDrained(t *testing.T) {
	// 5/hour: a drained bucket is 60 min from full, a flood's 12 min, a
	// margin no slow machine uses up during the flood.
	login := addrlimit.Policy{Name: "login", Limits: []addrlimit.Limit{{Burst: 5, Interval: 12 * time.Minute}}}
	for _, policy := range []string{"volatile-ttl", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := startServer(t, "--maxmemory-policy", policy)
			c := srv.client(t)
			ctx := context.Background()
			s := newStore(t, c, redisstore.WithEvictionAccepted(), redisstore.WithDenyCache(0))
			for range login.Limits[0].Burst {
				if res, err := s.Take(ctx, "abuser", login, 1); err != nil || !res.Allowed {
					t.Fatalf("draining the abuser: %+v %v", res, err)
				}
			}
			// Room for about 6,000 buckets; the flood writes 60,000.
			if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(usedMemory(t, c)+1<<20, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			const flood, workers = 60_000, 128
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := w; i < flood; i += workers {
						if _, err := s.Take(ctx, fmt.Sprint("flood-", i), login, 1); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			info := c.Info(ctx, "stats").Val()
			evicted := info[strings.Index(info, "evicted_keys:"):]
			evicted = evicted[:strings.Index(evicted, "\r\n")]
			res, err := s.Take(ctx, "abuser", login, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, %d keys left; the drained abuser's next request: allowed %v, remaining %d", evicted, c.DBSize(ctx).Val(), res.Allowed, res.Remaining)
			if evicted == "evicted_keys:0" {
				t.Fatal("Redis evicted nothing: the flood did not fill it")
			}
			if policy == "volatile-ttl" && res.Allowed {
				t.Fatalf("under volatile-ttl the drained abuser's bucket was evicted: %+v", res)
			}
		})
	}
}

// A client the fleet had limited stays limited when Redis is full and
// newcomers' OOM failures have opened the circuit: each instance's FailLocal
// mirror continues from Redis's last answer. Two instances, 5/hour.
func TestFullRedisKeepsLimitedClientsLimited(t *testing.T) {
	srv := startServer(t, "--maxmemory-policy", "noeviction")
	c := srv.client(t)
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	var fleet []*addrlimit.Limiter
	for range 2 {
		s, err := redisstore.New(c, prefix, redisstore.WithTimeout(testTimeout), redisstore.WithBreaker(3, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := addrlimit.New(5, time.Hour, addrlimit.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, lim)
	}
	ctx := context.Background()
	for i := range 6 { // drained through both, which mirror Redis's empty bucket
		if d := fleet[i%2].AllowKey(ctx, "", "abuser", 1); d.Degraded || d.Denied() != (i == 5) {
			t.Fatalf("request %d before Redis was full: %+v", i+1, d)
		}
	}
	fillRedis(t, c)
	for _, lim := range fleet {
		var last addrlimit.Decision
		for i := range 3 {
			last = lim.AllowKey(ctx, "", fmt.Sprint("newcomer-", i), 1)
		}
		if last = lim.AllowKey(ctx, "", "newcomer-3", 1); !errors.Is(last.Err, redisstore.ErrCircuitOpen) {
			t.Fatalf("after 3 newcomers' OOM failures: %v, want the circuit open", last.Err)
		}
	}
	allowed := 0
	for i := range 20 {
		if d := fleet[i%2].AllowKey(ctx, "", "abuser", 1); !d.Denied() {
			allowed++
		}
	}
	if allowed != 0 {
		t.Fatalf("the drained client got %d of 20 requests through a full Redis, want 0", allowed)
	}
}
