package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
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
func startCluster(t testing.TB) []*redisServer { return startClusterOf(t, 0) }

// startClusterOf starts a Redis Cluster of three masters with replicas
// replicas each (nodes[:3] are the masters), with a node timeout of 1 s, so
// that a replica takes over a dead master within a few seconds.
func startClusterOf(t testing.TB, replicas int) []*redisServer {
	t.Helper()
	needRedis(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: it comes with redis-server (Debian/Ubuntu: apt-get install -y redis-server)")
	}
	var nodes []*redisServer
	args := []string{"--cluster", "create"}
	for range 3 * (1 + replicas) {
		srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no", "--repl-diskless-sync-delay", "0")
		nodes = append(nodes, srv)
		args = append(args, srv.addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	known := fmt.Sprint("cluster_known_nodes:", len(nodes))
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		c := n.client(t)
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) {
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
// budget, batches spread over many slots, in-flight slots, and a master
// killed.
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
	t.Run("several limits equal x/time/rate", func(t *testing.T) {
		differential(t, 20_000, func(t testing.TB) redis.UniversalClient { return clusterClient(t, nodes) })
	})
	t.Run("in-flight slots across slots", func(t *testing.T) { inflightOnCluster(t, nodes) })
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

// replicaSynced waits until every replica among nodes has its master link
// up, so that a replica can take over when its master dies.
func replicaSynced(t *testing.T, nodes []*redisServer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		c := n.client(t)
		for {
			info, err := c.Info(context.Background(), "replication").Result()
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s not in sync: %q %v", n.addr(), info, err)
			}
			time.Sleep(20 * time.Millisecond) // polling for a state
		}
	}
}

// replicated waits until master's replica has acknowledged every write it
// has made, and returns the replica's address.
func replicated(t *testing.T, master *redisServer) string {
	t.Helper()
	c := master.client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		var offset, acked int64 = -1, -1
		var port string
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				offset, _ = strconv.ParseInt(v, 10, 64)
			}
			if strings.HasPrefix(line, "slave0:") {
				for field := range strings.SplitSeq(line, ",") {
					if v, ok := strings.CutPrefix(field, "offset="); ok {
						acked, _ = strconv.ParseInt(v, 10, 64)
					}
					if v, ok := strings.CutPrefix(field, "port="); ok {
						port = v
					}
				}
			}
		}
		if offset >= 0 && acked >= offset && port != "" {
			return "127.0.0.1:" + port
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica of %s acknowledged offset %d of %d:\n%s", master.addr(), acked, offset, info)
		}
		time.Sleep(20 * time.Millisecond) // polling for a state
	}
}

// A master that has a replica is killed during traffic (3 masters + 3
// replicas, cluster-node-timeout 1 s, docs/redis.md's client options): its
// replica is promoted within seconds, and the store must follow it. A
// FailOpen and a FailLocal instance each ask every 5 ms for a key drained
// before the kill, on the victim's slots, and for a key on a live master
// (deny cache off: it would answer the drained key without Redis; store
// timeout 500 ms, far above a round trip on a loaded machine). Bounds: no
// decision of the victim's key is degraded later than 10 s after the kill
// (the cluster's failover, then the store's probe reloads the slot map; 60 s
// before, when only ClusterStateReloadInterval did); FailLocal lets nothing
// through (it continues from Redis's denial), FailOpen at most what it
// decided while degraded (≤ 2,000 at 200/s over 10 s); the promoted replica
// still holds the drained bucket; the live master's key is never degraded.
func TestClusterMasterFailover(t *testing.T) {
	nodes := startClusterOf(t, 1)
	replicaSynced(t, nodes)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	readme := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	type run struct {
		name string
		lim  *addrlimit.Limiter
		s    *redisstore.Store
	}
	var runs []*run
	for _, fp := range []addrlimit.FailurePolicy{addrlimit.FailOpen, addrlimit.FailLocal} {
		s := newStore(t, readme(), prefix, redisstore.WithDenyCache(0), redisstore.WithTimeout(500*time.Millisecond))
		lim, err := addrlimit.New(5, time.Hour, addrlimit.WithStore(s), addrlimit.WithStoreFailure(fp))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, &run{fp.String(), lim, s})
	}
	// A key per instance on the victim's slots, and one on another master.
	cc := readme()
	ctx := context.Background()
	pol := runs[0].lim.Policies()[0]
	masterOf := func(addr string) string {
		m, err := cc.MasterForKey(ctx, runs[0].s.RedisKey(addr, pol))
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	victim := masterOf("192.0.2.1")
	var victimKeys []string
	var liveKey string
	for i := 1; len(victimKeys) < len(runs) || liveKey == ""; i++ {
		addr := fmt.Sprintf("192.0.2.%d", i)
		switch m := masterOf(addr); {
		case m == victim && len(victimKeys) < len(runs):
			victimKeys = append(victimKeys, addr)
		case m != victim && liveKey == "":
			liveKey = addr
		}
	}
	for i, r := range runs {
		for range 5 {
			if d := r.lim.Allow(req(victimKeys[i] + ":1")); d.Outcome != addrlimit.Allowed || d.Degraded {
				t.Fatalf("%s: draining: %+v", r.name, d)
			}
		}
		if d := r.lim.Allow(req(victimKeys[i] + ":1")); d.Outcome != addrlimit.Limited || d.Degraded {
			t.Fatalf("%s: the drained key: %+v", r.name, d)
		}
	}
	var srv *redisServer
	for _, n := range nodes {
		if n.addr() == victim {
			srv = n
		}
	}
	// Replication is asynchronous: a write the replica has not received is
	// lost in a failover. The drained buckets must be on the replica.
	replica := replicated(t, srv)
	const window, rate, bound = 12 * time.Second, 5 * time.Millisecond, 10 * time.Second
	type result struct {
		recovered          time.Duration // after the kill, the first decision Redis answered
		relapsed           int           // degraded decisions after it, not by a slow round trip
		degraded, allowed  int
		decisions          int
		liveDegraded       int
		allowedAfterReturn int
		slow               int // degraded by a round trip that outlived the timeout: the machine's load
	}
	results := make([]result, len(runs))
	killed := make(chan time.Time, len(runs)+1)
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			res := &results[i]
			tick := time.NewTicker(rate)
			defer tick.Stop()
			at := <-killed
			for now := range tick.C {
				if now.Sub(at) > window {
					return
				}
				d := r.lim.Allow(req(victimKeys[i] + ":1"))
				res.decisions++
				if d.Outcome == addrlimit.Allowed {
					res.allowed++
				}
				since := time.Since(at)
				switch {
				case !d.Degraded && res.recovered == 0:
					res.recovered = since
				case d.Degraded && res.recovered != 0 && slowRoundTrip(d.Err):
					res.slow++
				case d.Degraded && res.recovered != 0:
					res.relapsed++
				}
				if d.Degraded {
					res.degraded++
				} else if d.Outcome == addrlimit.Allowed {
					res.allowedAfterReturn++
				}
				if d := r.lim.Allow(req(liveKey + ":1")); d.Degraded && !slowRoundTrip(d.Err) {
					res.liveDegraded++
				}
			}
		})
	}
	rc := redis.NewClient(&redis.Options{Addr: replica})
	t.Cleanup(func() { rc.Close() })
	var promoted time.Duration
	wg.Go(func() { // when the replica becomes a master
		at := <-killed
		for time.Since(at) < window {
			if role, err := rc.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
				promoted = time.Since(at)
				return
			}
			time.Sleep(20 * time.Millisecond) // polling for a state
		}
	})
	at := time.Now()
	srv.stop()
	for range len(runs) + 1 {
		killed <- at
	}
	wg.Wait()
	t.Logf("replica %s promoted %.1f s after the kill", replica, promoted.Seconds())
	for i, r := range runs {
		res := results[i]
		t.Logf("%s: %d decisions over %v after the kill, %d degraded; Redis answered again %.1f s after the kill; after that %d degraded by a slow round trip, %d otherwise; %d allowed (%d undegraded); %d of the live master's degraded otherwise than by a slow round trip",
			r.name, res.decisions, window, res.degraded, res.recovered.Seconds(), res.slow, res.relapsed, res.allowed, res.allowedAfterReturn, res.liveDegraded)
	}
	for i, r := range runs {
		res := results[i]
		if res.degraded == 0 {
			t.Fatalf("%s: no degraded decision: the kill was not seen", r.name)
		}
		if res.recovered == 0 || res.recovered > bound {
			t.Errorf("%s: Redis answered again %.1f s after the kill (0: never within %v), want at most %v", r.name, res.recovered.Seconds(), window, bound)
		}
		if res.relapsed != 0 {
			t.Errorf("%s: %d decisions degraded after Redis answered again, not by a slow round trip, want 0", r.name, res.relapsed)
		}
		if res.allowedAfterReturn != 0 {
			t.Errorf("%s: the promoted replica allowed %d requests of a drained key, want 0", r.name, res.allowedAfterReturn)
		}
		if res.liveDegraded != 0 {
			t.Errorf("%s: %d decisions of a live master's key degraded, want 0", r.name, res.liveDegraded)
		}
	}
	if n := results[1].allowed; n != 0 {
		t.Errorf("FailLocal let %d requests of a drained key through, want 0", n)
	}
	if n := results[0].allowed; n > int(bound/rate) {
		t.Errorf("FailOpen let %d requests of a drained key through, want at most %d (%v at one per %v)", n, bound/rate, bound, rate)
	}
}

// slowRoundTrip reports whether err came from a round trip that outlived the
// store's timeout (or a circuit such round trips opened). Once the promoted
// replica has answered, and on a live master throughout, such a failure is
// the machine's load, not the failover: TestClusterMasterFailover measures
// recovery as the first answer after the kill and leaves these out of what
// it asserts after that, instead of depending on every round trip meeting
// its timeout on a loaded machine. (During the failover itself go-redis
// times out too, so the time to the first answer is what is bounded.)
func slowRoundTrip(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
