package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/addrlimit/addrlimit/store"
	"github.com/addrlimit/addrlimit/storetest"
	"github.com/redis/go-redis/v9"
)

func req(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

// conformance runs the suite in a synctest bubble, with the store's script
// on the bubble's clock: exact figures (Tolerance 0) however loaded the
// machine. newClient is called inside the bubble, as go-redis must be, and
// must give a pool larger than the suite's concurrency (25): go-redis keeps
// the timers of a waiting pool in a global sync.Pool, which a later bubble
// may not use.
func conformance(t *testing.T, newClient func(t testing.TB) redis.UniversalClient) {
	for _, v := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"default", nil},
		{"without deny cache", []redisstore.Option{redisstore.WithDenyCache(0)}},
		{"without batching", []redisstore.Option{redisstore.WithMaxBatch(1)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store {
					return newStore(t, newClient(t), append(v.opts, redisstore.WithClock(time.Now))...)
				},
				Bubble: true,
			})
		})
	}
}

func TestConformance(t *testing.T) {
	needRedis(t)
	conformance(t, func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// instance is one API instance of a fleet: its own client, store and
// limiter.
type instance struct {
	lim   *addrlimit.Limiter
	store *redisstore.Store
	h     http.Handler

	mu   sync.Mutex
	errs []error // of the degraded decisions
}

func (in *instance) degraded() []error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.errs
}

func newInstance(t testing.TB, c redis.UniversalClient, limit int, per time.Duration, sopts []redisstore.Option, lopts ...addrlimit.Option) *instance {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithTimeout(testTimeout)}, sopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{store: s}
	lopts = append([]addrlimit.Option{addrlimit.WithStore(s), addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		if d.Degraded {
			in.mu.Lock()
			in.errs = append(in.errs, d.Err)
			in.mu.Unlock()
		}
	})}, lopts...)
	if in.lim, err = addrlimit.New(limit, per, lopts...); err != nil {
		t.Fatal(err)
	}
	in.h = in.lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	return in
}

// codes sends n requests from remote and returns the status codes and bodies.
func (in *instance) codes(remote string, n int) (string, []string) {
	var got []int
	var bodies []string
	for range n {
		w := httptest.NewRecorder()
		in.h.ServeHTTP(w, req(remote))
		got = append(got, w.Code)
		bodies = append(bodies, w.Body.String())
	}
	return fmt.Sprint(got), bodies
}

// hammer sends perGoroutine requests from remote in each of 40 goroutines,
// alternating between the instances, and returns how many were allowed.
func hammer(t *testing.T, fleet []*instance, remote string, perGoroutine int) int64 {
	t.Helper()
	var allowed, other atomic.Int64
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			for range perGoroutine {
				w := httptest.NewRecorder()
				fleet[g%len(fleet)].h.ServeHTTP(w, req(remote))
				switch w.Code {
				case 200:
					allowed.Add(1)
				case 429:
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i, in := range fleet {
		if errs := in.degraded(); len(errs) != 0 {
			t.Fatalf("instance %d: %d degraded decisions (store errors %d, first %v); the counts would mean nothing", i, len(errs), in.lim.Stats().StoreErrors, errs[0])
		}
	}
	if other.Load() != 0 {
		t.Fatalf("%d responses neither 200 nor 429", other.Load())
	}
	return allowed.Load()
}

// Two instances, each with its own client and limiter, share one budget.
func TestTwoInstancesShareOneBudget(t *testing.T) {
	needRedis(t)
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	fleet := []*instance{
		newInstance(t, shared.client(t), 50, time.Hour, []redisstore.Option{prefix}),
		newInstance(t, shared.client(t), 50, time.Hour, []redisstore.Option{prefix}),
	}
	if got := hammer(t, fleet, "198.51.100.7:1", 10); got != 50 {
		t.Fatalf("allowed %d of 400 across two instances, want exactly 50", got)
	}
}

// Stacked limiters on one store: a global 100/s limiter and a 5/min login limiter,
// both with the default policy name, on one store. Logins do not spend the
// API budget, and API calls do not spend logins.
func TestLimitersWithDifferentPoliciesDoNotShareBuckets(t *testing.T) {
	needRedis(t)
	s := newStore(t, shared.client(t))
	api, err := addrlimit.New(100, time.Second, addrlimit.WithStore(s))
	if err != nil {
		t.Fatal(err)
	}
	loginLim, err := addrlimit.New(5, time.Minute, addrlimit.WithStore(s))
	if err != nil {
		t.Fatal(err)
	}
	r := req("198.51.100.7:1")
	for i := range 3 {
		if d := loginLim.Allow(r); d.Outcome != addrlimit.Allowed || d.Degraded || d.Remaining != 4-i {
			t.Fatalf("login %d: %+v", i+1, d)
		}
	}
	for i := range 5 {
		if d := api.Allow(r); d.Outcome != addrlimit.Allowed || d.Degraded || d.Remaining < 94 {
			t.Fatalf("API call %d after 3 logins: %+v, want the API budget untouched by logins", i+1, d)
		}
	}
	for i := range 2 {
		if d := loginLim.Allow(r); d.Outcome != addrlimit.Allowed || d.Remaining != 1-i {
			t.Fatalf("login %d after 5 API calls: %+v, want the login budget untouched by API calls", i+4, d)
		}
	}
	if d := loginLim.Allow(r); d.Outcome != addrlimit.Limited || d.Degraded {
		t.Fatalf("6th login: %+v", d)
	}
}

// A Redis blip (CLIENT PAUSE) after a key was drained through both
// instances: FailLocal continues from what Redis last said, so the key
// stays drained. The deny cache is off, so that every decision during the
// pause asks Redis and is decided by the failure policy. The pause lasts
// longer than the decisions need (three timeouts per instance open their
// circuits); the server is the test's own and is killed at the end.
func TestFailLocalContinuesFromRedisAcrossABlip(t *testing.T) {
	srv := startServer(t)
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	var fleet []*instance
	for range 2 {
		fleet = append(fleet, newInstance(t, srv.client(t), 50, time.Hour, []redisstore.Option{
			prefix, redisstore.WithDenyCache(0), redisstore.WithTimeout(300 * time.Millisecond),
		}))
	}
	const remote = "198.51.100.9:1"
	// Drained in turns: each instance's last answer from Redis says empty.
	// (Drained concurrently, an instance may record an earlier answer last.)
	allowed := 0
	for i := range 60 {
		if d := fleet[i%2].lim.Allow(req(remote)); d.Degraded {
			t.Fatalf("drain, decision %d: degraded (%v)", i+1, d.Err)
		} else if d.Outcome == addrlimit.Allowed {
			allowed++
		}
	}
	if allowed != 50 {
		t.Fatalf("drain: allowed %d of 60, want 50", allowed)
	}
	admin := srv.client(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 10_000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	allowed = 0
	for i := range 20 {
		d := fleet[i%2].lim.Allow(req(remote))
		if !d.Degraded || d.Err == nil {
			t.Fatalf("decision %d during the pause: %+v, want degraded", i+1, d)
		}
		if d.Outcome == addrlimit.Allowed {
			allowed++
		}
	}
	if allowed > 5 {
		t.Fatalf("%d requests allowed during the blip across two instances, want at most 5", allowed)
	}
	t.Logf("allowed during the blip: %d of 20", allowed)
}

func TestExemptTrafficNeverReachesRedis(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c)
	tok, _ := addrlimit.NewInternalToken("internal-secret-0123456789")
	lim, _ := addrlimit.New(5, time.Minute, addrlimit.WithStore(s), addrlimit.WithExempt(tok.Match))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 20 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req("10.0.0.7:1", "Authorization", "Bearer internal-secret-0123456789"))
		if w.Code != 200 {
			t.Fatalf("exempt request got %d", w.Code)
		}
	}
	if n := calls.n.Load(); n != 0 {
		t.Fatalf("exempt traffic sent %d script calls to Redis", n)
	}
}

// A Redis that accepts connections but never answers: the call must give up
// after the store's timeout, not after go-redis's read timeout.
func TestTimeoutBoundsAHungRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // hold it open, never reply
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithTimeout(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.Take(context.Background(), "k", addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a deadline error", err)
	}
	// A hang detector, not a performance target: go-redis's own read timeout is 3 s.
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("Take took %v", elapsed)
	}
	// Through a limiter: the default failure policy decides locally.
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithStore(s))
	d1, d2 := lim.Allow(req("192.0.2.1:1")), lim.Allow(req("192.0.2.1:1"))
	if !d1.Degraded || d1.Outcome != addrlimit.Allowed || d2.Outcome != addrlimit.Limited || !errors.Is(d2.Err, context.DeadlineExceeded) {
		t.Fatalf("decisions %+v / %+v", d1, d2)
	}
}

// Kill Redis mid-run: each failure policy does what it says, the circuit
// opens after three failures, and once Redis is back the shared budget
// applies again without a restart.
func TestRedisOutageAndRecovery(t *testing.T) {
	srv := startServer(t)
	policies := []struct {
		policy addrlimit.FailurePolicy
		during string // codes of 6 requests while Redis is down
	}{
		{addrlimit.FailLocal, "[200 200 429 429 429 429]"},
		{addrlimit.FailOpen, "[200 200 200 200 200 200]"},
		{addrlimit.FailClosed, "[503 503 503 503 503 503]"},
	}
	for _, pc := range policies {
		t.Run(pc.policy.String(), func(t *testing.T) {
			prefix := redisstore.WithKeyPrefix(testPrefix(t))
			sopts := []redisstore.Option{prefix, redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond)}
			a := newInstance(t, srv.client(t), 2, time.Hour, sopts, addrlimit.WithStoreFailure(pc.policy))
			b := newInstance(t, srv.client(t), 2, time.Hour, sopts, addrlimit.WithStoreFailure(pc.policy))
			if got, _ := a.codes("192.0.2.1:1", 1); got != "[200]" || len(a.degraded()) != 0 {
				t.Fatalf("before the outage: %s (%d degraded)", got, len(a.degraded()))
			}
			srv.stop()
			got, bodies := a.codes("192.0.2.2:1", 6)
			if got != pc.during {
				t.Fatalf("during the outage: %s, want %s", got, pc.during)
			}
			for _, body := range bodies {
				if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "refused") || strings.Contains(body, "redis") || strings.Contains(body, "circuit") {
					t.Fatalf("error detail reached the client: %q", body)
				}
			}
			errs := a.degraded()
			if len(errs) != 6 {
				t.Fatalf("observer saw %d degraded decisions, want 6", len(errs))
			}
			for i, err := range errs {
				if open := errors.Is(err, redisstore.ErrCircuitOpen); open != (i >= 3) {
					t.Fatalf("degraded decision %d: error %v; want the circuit open from the 4th on", i+1, err)
				}
			}
			if err := srv.start(); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, a.store, b.store)
			// Redis is back (empty, without persistence): both instances share
			// one budget of 2 again, and StoreErrors stops growing.
			storeErrors := a.lim.Stats().StoreErrors
			got1, _ := a.codes("192.0.2.3:1", 1)
			got2, _ := b.codes("192.0.2.3:1", 2)
			if len(a.degraded()) != 6 || len(b.degraded()) != 0 || a.lim.Stats().StoreErrors != storeErrors {
				t.Fatalf("after recovery: degraded decisions (%d, %d), store errors %d then %d",
					len(a.degraded())-6, len(b.degraded()), storeErrors, a.lim.Stats().StoreErrors)
			}
			if got1 != "[200]" || got2 != "[200 429]" {
				t.Fatalf("after recovery: %s %s, want one budget of 2 shared by both instances", got1, got2)
			}
		})
	}
}

// waitClosed waits until every store answers a Peek again: their circuits
// closed once a probe reached Redis. The deadline is generous; the probe
// interval of the tests is 20 ms.
func waitClosed(t *testing.T, stores ...*redisstore.Store) {
	t.Helper()
	p := addrlimit.Policy{Name: "probe", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range stores {
		for {
			_, err := s.Peek(context.Background(), "k", p)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("store still failing 10 s after Redis returned: %v", err)
			}
			time.Sleep(5 * time.Millisecond) // polling for a state
		}
	}
}
