package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
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

// startCluster starts a Redis Cluster of three masters without replicas on
// loopback ports, killed when the test ends. A master that dies leaves its
// slots unserved while the others keep serving theirs
// (cluster-require-full-coverage no).
func startCluster(t testing.TB) []*redisServer {
	t.Helper()
	needRedis(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: it comes with redis-server (Debian/Ubuntu: apt-get install -y redis-server)")
	}
	var nodes []*redisServer
	args := []string{"--cluster", "create"}
	for range 3 {
		srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
		nodes = append(nodes, srv)
		args = append(args, srv.addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		c := n.client(t)
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster on %s not ready: %q %v", n.addr(), info, err)
			}
			time.Sleep(20 * time.Millisecond) // polling for a state
		}
	}
	return nodes
}

func clusterClient(t testing.TB, nodes []*redisServer) *redis.ClusterClient {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	return c
}

// A real three-master cluster: the conformance suite, the fleet sharing one
// budget, batches spread over many slots, and a master killed.
func TestCluster(t *testing.T) {
	nodes := startCluster(t)
	t.Run("conformance", func(t *testing.T) {
		conformance(t, func(t testing.TB) redis.UniversalClient { return clusterClient(t, nodes) })
	})
	t.Run("two instances share one budget", func(t *testing.T) {
		prefix := redisstore.WithKeyPrefix(testPrefix(t))
		fleet := []*instance{
			newInstance(t, clusterClient(t, nodes), 50, time.Hour, []redisstore.Option{prefix}),
			newInstance(t, clusterClient(t, nodes), 50, time.Hour, []redisstore.Option{prefix}),
		}
		if got := hammer(t, fleet, "198.51.100.7:1", 10); got != 50 {
			t.Fatalf("allowed %d of 400 across two instances, want exactly 50", got)
		}
	})
	t.Run("batches over many slots are exact", func(t *testing.T) {
		s := newStore(t, clusterClient(t, nodes))
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
		var allowed [32]atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				for i := range 40 {
					k := (g + i) % len(allowed)
					res, err := s.Take(context.Background(), fmt.Sprint("key-", k), p, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						allowed[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		for k := range allowed {
			if n := allowed[k].Load(); n != 10 {
				t.Fatalf("key-%d: %d allowed of 80, want exactly the burst of 10", k, n)
			}
		}
	})
	t.Run("a master killed", func(t *testing.T) { killOneMaster(t, nodes) })
}

// killOneMaster kills the master of one key: that key's decisions go to the
// failure policy (its circuit opens after three failures) while keys on the
// other masters are still shared exactly by two instances.
func killOneMaster(t *testing.T, nodes []*redisServer) {
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	sopts := []redisstore.Option{prefix, redisstore.WithTimeout(500 * time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond)}
	const burst = 4
	a := newInstance(t, clusterClient(t, nodes), burst, time.Hour, sopts)
	b := newInstance(t, clusterClient(t, nodes), burst, time.Hour, sopts)
	p := a.lim.Policies()[0]
	cc := clusterClient(t, nodes)
	ctx := context.Background()
	// One address per master, found through the slot owners.
	byNode := map[string]string{}
	for i := 0; len(byNode) < len(nodes); i++ {
		addr := fmt.Sprintf("192.0.2.%d", i+1)
		m, err := cc.MasterForKey(ctx, a.store.RedisKey(addr, p))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byNode[m.Options().Addr]; !ok {
			byNode[m.Options().Addr] = addr
		}
	}
	victim := nodes[0]
	dead := byNode[victim.addr()]
	victim.stop()
	// The dead master's key: every decision degraded, decided by FailLocal
	// (a fresh bucket of 4 on each instance), the circuit open after three.
	for _, in := range []*instance{a, b} {
		got, _ := in.codes(dead+":1", 6)
		if got != "[200 200 200 200 429 429]" {
			t.Fatalf("key on the dead master: %s, want FailLocal's own bucket of %d", got, burst)
		}
		errs := in.degraded()
		if len(errs) != 6 || !errors.Is(errs[5], redisstore.ErrCircuitOpen) || errors.Is(errs[2], redisstore.ErrCircuitOpen) {
			t.Fatalf("degraded decisions %d, errors %v; want 6, the circuit open from the 4th on", len(errs), errs)
		}
	}
	// Keys on the live masters: shared exactly, never degraded, even though
	// the dead master's circuit is open.
	for _, n := range nodes[1:] {
		addr := byNode[n.addr()] + ":1"
		var got []string
		for i := range 6 {
			c, _ := []*instance{a, b}[i%2].codes(addr, 1)
			got = append(got, c)
		}
		if fmt.Sprint(got) != "[[200] [200] [200] [200] [429] [429]]" {
			t.Fatalf("key on live master %s: %v, want one budget of %d shared by both instances", n.addr(), got, burst)
		}
	}
	for i, in := range []*instance{a, b} {
		if n := len(in.degraded()); n != 6 {
			t.Fatalf("instance %d: %d degraded decisions, want only the dead master's 6", i, n)
		}
	}
}

// BenchmarkClusterTake: decisions per second against a real three-master
// Cluster on loopback, random keys, at 16 and 64 concurrent callers. (It
// showed that grouping a batch into one script call per hash slot was no
// faster than one script call per call: a batch of random keys spans about
// as many slots as it has calls.)
func BenchmarkClusterTake(b *testing.B) {
	nodes := startCluster(b)
	for _, callers := range []int{16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := newStore(b, clusterClient(b, nodes), redisstore.WithKeyPrefix(testPrefix(b)))
			p := addrlimit.Policy{Name: "bench", Limits: []addrlimit.Limit{{Burst: 1 << 30, Interval: time.Microsecond}}}
			parallel(b, callers, func(int) error {
				_, err := s.Take(context.Background(), strconv.FormatUint(rand.Uint64(), 36), p, 1)
				return err
			})
		})
	}
}
