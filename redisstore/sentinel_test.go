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
// Before reading that, each instance makes one decision per client that
// Redis answers, which pays whatever its fallback still owes: on a loaded
// machine, a round trip of the last second may outlive the store's timeout
// and leave fallback decisions unpaid, which the bound would not count (the
// slow-end case holds writes for the last 300 ms: +28 to +31 per client
// were counted so, −0 with the payment; +31 once under load).
//
// Killed: the local fallbacks decide during the outage D from what each
// instance last heard, and pay what they allowed as a debt to the new
// primary. Each instance spends on its own the R tokens the bucket held
// when the primary died, plus rate × D: the pair owes 2(R + rate × D)
// where the new primary holds R + rate × D, and a debt is charged only down
// to one burst below empty (store.DebtStore), so R + rate × D − burst
// is forgiven when positive. With every burst spent first (R = 0, D about
// 2 s) nothing is: measured −4 to +1 per client. With the burst unspent
// (the failover after 100 ms of traffic, R about 430): about 130, the
// formula within a few tokens. (The +43 to +73 once seen here after a fixed
// second of traffic were a loaded machine's: slowed clients had left R of
// 150 to 400 unspent.) Without debts: 420–448. During a flood (each
// instance's fallback lets through as many other addresses as the machine
// allows, 13,000 to 21,000 here, about its debt record's 16,384): the same,
// −1 per client (+210 when a full record refused debts and failed payments
// lost them).
//
// Handed over: Sentinel promotes the replica, and the old primary accepts
// writes until the instances follow the new one, then resyncs from it; the
// decisions it answered in that window are forgotten: measured 92–106 per
// client, about rate × the time the instances took to follow (1.1–1.4 s),
// with or without debts. Replication in Redis is asynchronous: no client
// can keep those writes.
func TestSentinelFailoverDuringTraffic(t *testing.T) {
	kill := func(t *testing.T, s *sentinels) { s.primary.stop() }
	none := func(time.Duration) float64 { return 0 }
	for _, c := range []failoverCase{
		{name: "primary killed", failover: kill, lost: none},
		{name: "primary killed with the burst unspent", unspent: true, failover: kill, lost: none},
		{name: "primary killed during a flood", flood: true, failover: kill, lost: none},
		{name: "primary killed, a slow Redis at the end", slowEnd: true, failover: kill, lost: none},
		{name: "SENTINEL FAILOVER", failover: func(t *testing.T, s *sentinels) {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.addrs[0]})
			defer c.Close()
			if err := c.Failover(context.Background(), masterName).Err(); err != nil {
				t.Fatal(err)
			}
		}, lost: func(followed time.Duration) float64 { return followed.Seconds() }},
	} {
		t.Run(c.name, func(t *testing.T) { failoverDuringTraffic(t, c) })
	}
}

// failoverCase is one run of TestSentinelFailoverDuringTraffic.
type failoverCase struct {
	name string
	// unspent starts the failover after 100 ms of traffic, with most of
	// each burst unspent; otherwise once every burst is spent.
	unspent bool
	// flood sends requests from other addresses, each new, through both
	// instances during the outage.
	flood bool
	// slowEnd makes the new primary hold writes (CLIENT PAUSE WRITE) for
	// the last 300 ms of traffic and 100 ms beyond, longer than the
	// store's timeout: the fallbacks decide again, as they do when a loaded
	// machine's round trips outlive it.
	slowEnd  bool
	failover func(t *testing.T, s *sentinels)
	// lost is how long writes may go to a primary whose data the new one
	// never receives, in seconds, given how long the instances took to
	// follow the new primary.
	lost func(followed time.Duration) float64
}

func failoverDuringTraffic(t *testing.T, fc failoverCase) {
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
	p := fleet[0].Policies()[0]
	clientKey := func(k int) string { return "198.51.100." + strconv.Itoa(k+1) }
	onServer := func(srv *redisServer) *redisstore.Store {
		st, err := redisstore.New(srv.client(t), prefix, redisstore.WithTimeout(testTimeout))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	onPrimary := onServer(s.primary)
	held := func(st *redisstore.Store) (r [keys]int) { // each client's whole tokens
		for k := range r {
			res, err := st.Peek(context.Background(), clientKey(k), p)
			if err != nil {
				t.Fatal(err)
			}
			r[k] = res.Remaining
		}
		return r
	}
	// Each store has answered once (master found, script loaded): a first
	// call that outlived the timeout on a loaded machine would let its
	// instance's fallback start from a full bucket instead of from R.
	waitClosed(t, stores...)
	var allowed [keys]atomic.Int64
	var degraded, late atomic.Int64 // late: after both instances answered again
	var recovered atomic.Bool
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
				r.RemoteAddr = clientKey(k) + ":1"
				d := lim.Allow(r)
				if d.Outcome == addrlimit.Allowed {
					allowed[k].Add(1)
				}
				if d.Degraded {
					degraded.Add(1)
					if recovered.Load() {
						late.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // a client's pace, not a spinning loop
			}
		})
	}
	if fc.unspent {
		time.Sleep(100 * time.Millisecond) // traffic before the failover
	} else {
		waitFor(t, "every client's burst spent", func() bool { return held(onPrimary) == [keys]int{} })
	}
	before := held(onPrimary) // R, per client
	stopFlood := make(chan struct{})
	var flooder sync.WaitGroup
	var flooded, floodedLocal atomic.Int64
	for i := range 2 {
		if !fc.flood {
			break
		}
		flooder.Go(func() { sendFlood(fleet[i], 2, i, stopFlood, &flooded, &floodedLocal) })
	}
	started := time.Now()
	fc.failover(t, s)
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
	outage := time.Since(started) // until both instances' stores answer again
	recovered.Store(true)
	close(stopFlood)
	flooder.Wait()
	time.Sleep(2700 * time.Millisecond) // traffic after the failover: debts are repaid
	if fc.slowEnd {
		admin := s.replica.client(t)
		if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 400, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	// What an instance's fallback allowed reaches Redis with the key's next
	// decision that Redis answers. On a loaded machine a round trip may
	// outlive the store's timeout during the last second, and the fallback
	// decides again: one decision per key and instance that Redis answers
	// pays what is still owed, so that Redis holds all that was allowed.
	// (Without this, a circuit open at the end left its fallback's
	// decisions unpaid, and uncounted by the bound: +31 per client once, in
	// one of thirteen runs beside two busy loops and a Redis-heavy job.)
	for i, lim := range fleet {
		for k := range keys {
			for {
				waitClosed(t, stores[i])
				d := lim.Allow(req(clientKey(k) + ":1"))
				if d.Outcome == addrlimit.Allowed {
					allowed[k].Add(1)
				}
				if !d.Degraded {
					break
				}
				late.Add(1)
			}
		}
	}
	elapsed := time.Since(start).Seconds()
	budget := burst + rate*elapsed
	primary := onServer(s.replica)
	// The bound: what the debt cap forgives (see above); in a handover, what
	// the old primary accepted between the replica's promotion and the
	// instances following it; and a slack for the writes the replica had
	// not received when the primary died and the refill between this
	// test's reads and the events they time.
	const slack = burst / 25
	worst, sum, worstForgiven, worstOver := -budget, 0.0, 0.0, -budget
	for k := range allowed {
		// What Redis still holds beyond empty is owed: the client got it
		// now and pays it back over the next seconds.
		res, err := primary.Peek(context.Background(), clientKey(k), p)
		if err != nil {
			t.Fatal(err)
		}
		owed := max(0, float64(res.ResetAfter-time.Duration(burst)*p.Limits[0].Interval)/float64(p.Limits[0].Interval))
		extra := float64(allowed[k].Load()) - budget - owed
		forgiven := max(0, float64(before[k])+rate*outage.Seconds()-burst)
		over := extra - (slack + forgiven + fc.lost(followed)*rate)
		worst, sum, worstForgiven, worstOver = max(worst, extra), sum+extra, max(worstForgiven, forgiven), max(worstOver, over)
	}
	if fc.flood {
		t.Logf("other addresses during the outage: %d requests, %d decided by the fallbacks", flooded.Load(), floodedLocal.Load())
	}
	t.Logf("tokens held when the failover began %v; replica promoted %v after, both instances on it after %v, answering after %v; %d degraded decisions (%d after both answered); extra decisions per client beyond its budget of %.0f over %.1f s, less what Redis still holds as debt: worst %.0f, mean %.1f (debt cap forgives up to %.0f)",
		before, promoted.Round(10*time.Millisecond), followed.Round(10*time.Millisecond), outage.Round(10*time.Millisecond), degraded.Load(), late.Load(), budget, elapsed, worst, sum/keys, worstForgiven)
	if worstOver > 0 {
		t.Fatalf("a client got %.0f decisions beyond its bound across a failover (%d + what the debt cap forgives + what a handover loses)", worstOver, slack)
	}
}
