package redisstore_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

const sentinelHint = "redis-sentinel not found: install it (Debian/Ubuntu: apt-get install -y redis-sentinel; macOS: it comes with brew install redis)"

// sentinels is a primary, a replica and three sentinels on loopback ports,
// all killed when the test ends.
type sentinels struct {
	primary, replica *redisServer
	addrs            []string // of the sentinels
}

const masterName = "addrlimit"

// startSentinels starts the primary, its replica and three sentinels that
// monitor it with a quorum of 2, down after 500 ms, and waits until the
// replica is in sync and each sentinel knows the replica and the two others.
func startSentinels(t *testing.T) *sentinels {
	t.Helper()
	needRedis(t)
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(sentinelHint + "; CI requires the real-Redis tests")
		}
		t.Skip(sentinelHint)
	}
	s := &sentinels{primary: startServer(t)}
	s.replica = startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.primary.port))
	waitFor(t, "the replica in sync", func() bool {
		info, err := s.replica.client(t).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		s.addrs = append(s.addrs, startSentinel(t, s.primary.port))
	}
	for _, a := range s.addrs {
		c := redis.NewSentinelClient(&redis.Options{Addr: a})
		t.Cleanup(func() { c.Close() })
		waitFor(t, "sentinel "+a+" ready", func() bool {
			m, err := c.Master(context.Background(), masterName).Result()
			return err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2"
		})
	}
	return s
}

// startSentinel runs one redis-sentinel on a free port with its
// configuration in a temporary directory (sentinels rewrite it).
func startSentinel(t *testing.T, primaryPort int) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
loglevel warning
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 500
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, masterName, primaryPort, masterName, masterName, masterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("redis-sentinel", conf)
		dieWithTests(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		deadline := time.Now().Add(10 * time.Second)
		for {
			if c.Ping(context.Background()).Err() == nil {
				c.Close()
				return addr
			}
			select {
			case <-exited:
			default:
				if time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond) // polling for a state
					continue
				}
			}
			break
		}
		c.Close()
		if attempt == 2 {
			t.Fatalf("redis-sentinel on %s did not start", addr)
		}
	}
}

// waitFor polls cond until it holds, for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling for a state
	}
}

func (s *sentinels) client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: masterName, SentinelAddrs: s.addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// masterPort asks the first sentinel which port the master has.
func (s *sentinels) masterPort(t *testing.T) string {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.addrs[0]})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(context.Background(), masterName).Result()
	if err != nil || len(addr) != 2 {
		return ""
	}
	return addr[1]
}

// A real Sentinel failover during traffic: two instances with
// redis.NewFailoverClient flood four clients under 100/s in bursts of 500,
// the primary is killed (or handed over with SENTINEL FAILOVER), the
// sentinels promote the replica, and the instances follow it. A client's
// extra decisions are those allowed beyond burst + rate × elapsed, less
// what Redis still holds as debt at the end (the client pays it back).
//
// Killed: the local fallbacks decide during the failover and their debts,
// paid to the new primary, take back what they allowed. Measured: -10 to
// +10 per client in most runs, up to +73 in a few (replication offsets
// sampled before the kill showed no lag: not explained). Without debts:
// 420–448.
//
// Handed over: Sentinel promotes the replica, and the old primary accepts
// writes until the instances follow the new one, then resyncs from it; the
// decisions it answered in that window are forgotten: measured 92–106 per
// client, about rate × the time the instances took to follow (1.1–1.4 s),
// with or without debts. Replication in Redis is asynchronous: no client
// can keep those writes.
func TestSentinelFailoverDuringTraffic(t *testing.T) {
	for _, c := range []struct {
		name     string
		failover func(t *testing.T, s *sentinels)
		// lost is how long writes may go to a primary whose data the new
		// one never receives, in seconds, given how long the instances
		// took to follow the new primary.
		lost func(followed time.Duration) float64
	}{
		{"primary killed", func(t *testing.T, s *sentinels) { s.primary.stop() }, func(time.Duration) float64 { return 0 }},
		{"SENTINEL FAILOVER", func(t *testing.T, s *sentinels) {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.addrs[0]})
			defer c.Close()
			if err := c.Failover(context.Background(), masterName).Err(); err != nil {
				t.Fatal(err)
			}
		}, func(followed time.Duration) float64 { return followed.Seconds() }},
	} {
		t.Run(c.name, func(t *testing.T) { failoverDuringTraffic(t, c.failover, c.lost) })
	}
}

func failoverDuringTraffic(t *testing.T, failover func(*testing.T, *sentinels), lostWindow func(followed time.Duration) float64) {
	s := startSentinels(t)
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	const burst, rate, keys = 500, 100.0, 4 // a policy of 100/s in bursts of 500
	var fleet []*addrlimit.Limiter
	var stores []*redisstore.Store
	var clients []*redis.Client
	for range 2 {
		c := s.client(t)
		clients = append(clients, c)
		st, err := redisstore.New(c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := addrlimit.New(burst, 5*time.Second, addrlimit.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		fleet, stores = append(fleet, lim), append(stores, st)
	}
	var allowed [keys]atomic.Int64
	var degraded atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 8 {
		wg.Go(func() {
			lim := fleet[g%2]
			r := httptest.NewRequest("GET", "/", nil)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (g + i) % keys
				r.RemoteAddr = "198.51.100." + strconv.Itoa(k+1) + ":1"
				d := lim.Allow(r)
				if d.Outcome == addrlimit.Allowed {
					allowed[k].Add(1)
				}
				if d.Degraded {
					degraded.Add(1)
				}
				time.Sleep(time.Millisecond) // a client's pace, not a spinning loop
			}
		})
	}
	time.Sleep(time.Second) // traffic before the failover
	started := time.Now()
	failover(t, s)
	waitFor(t, "the sentinels to promote the replica", func() bool { return s.masterPort(t) == strconv.Itoa(s.replica.port) })
	promoted := time.Since(started)
	newPort := "tcp_port:" + strconv.Itoa(s.replica.port) + "\r\n"
	for _, c := range clients {
		waitFor(t, "the instances to follow the new primary", func() bool {
			info, err := c.Info(context.Background(), "server").Result()
			return err == nil && strings.Contains(info, newPort)
		})
	}
	followed := time.Since(started)
	waitClosed(t, stores...)
	time.Sleep(3 * time.Second) // traffic after the failover: debts are repaid
	close(stop)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	budget := burst + rate*elapsed
	p := fleet[0].Policies()[0]
	primary, err := redisstore.New(s.replica.client(t), prefix, redisstore.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	worst, sum := -budget, 0.0
	for k := range allowed {
		// What Redis still holds beyond empty is owed: the client got it
		// now and pays it back over the next seconds.
		res, err := primary.Peek(context.Background(), "198.51.100."+strconv.Itoa(k+1), p)
		if err != nil {
			t.Fatal(err)
		}
		owed := max(0, float64(res.ResetAfter-time.Duration(burst)*p.Interval)/float64(p.Interval))
		extra := float64(allowed[k].Load()) - budget - owed
		worst, sum = max(worst, extra), sum+extra
	}
	t.Logf("replica promoted %v after the failover began, both instances on it after %v; %d degraded decisions; extra decisions per client beyond its budget of %.0f over %.1f s, less what Redis still holds as debt: worst %.0f, mean %.1f",
		promoted.Round(10*time.Millisecond), followed.Round(10*time.Millisecond), degraded.Load(), budget, elapsed, worst, sum/keys)
	// A fifth of a burst (measured up to 73 in some runs), and, in a
	// handover, what the old primary accepted after the replica's promotion
	// and before the instances followed it.
	bound := burst/5 + lostWindow(followed)*rate
	if worst > bound {
		t.Fatalf("a client got %.0f decisions beyond its budget across a failover, want at most %.0f", worst, bound)
	}
}
