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
	"github.com/addrlimit/addrlimit/internal/storetest"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

// counter is a go-redis hook that counts the script calls sent (EVALSHA and
// EVAL; connection set-up commands are not decisions).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithKeyPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

func keysWithPrefix(t testing.TB, c *redis.Client, prefix string) []string {
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestConformance(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) addrlimit.Store { return newStore(t, c) },
		Tolerance: 100 * time.Millisecond,
	})
	t.Run("without deny cache", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New:       func(t *testing.T) addrlimit.Store { return newStore(t, c, redisstore.WithDenyCache(0)) },
			Tolerance: 100 * time.Millisecond,
		})
	})
}

// Two instances, each with its own client and limiter, share one budget.
func TestTwoInstancesShareOneBudget(t *testing.T) {
	needRedis(t)
	const burst = 50
	prefix := fmt.Sprintf("fleet:%d:", time.Now().UnixNano())
	var handlers []http.Handler
	for range 2 {
		s, err := redisstore.New(shared.client(t), redisstore.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := addrlimit.New(burst, time.Hour, addrlimit.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		handlers = append(handlers, lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}
	var allowed, other atomic.Int64
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			h := handlers[g%2]
			for range 10 {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req("198.51.100.7:1"))
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
	if allowed.Load() != burst || other.Load() != 0 {
		t.Fatalf("allowed %d of 400 across two instances, want exactly %d (other codes: %d)", allowed.Load(), burst, other.Load())
	}
}

func TestKeysExpireOnceFull(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	p := addrlimit.Policy{Burst: 3, Interval: 100 * time.Millisecond}
	ctx := context.Background()
	for range 2 {
		if _, err := s.Take(ctx, "k", p); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := c.PTTL(ctx, s.RedisKey("k")).Result()
	if err != nil || ttl <= 0 || ttl > 200*time.Millisecond {
		t.Fatalf("PTTL = %v, %v; want the time to a full bucket (at most 200ms)", ttl, err)
	}
	time.Sleep(ttl + 50*time.Millisecond) // the bucket is full again: Redis's clock, nothing to inject
	if n, err := c.Exists(ctx, s.RedisKey("k")).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after the bucket refilled (%d, %v)", n, err)
	}
}

func TestLongKeysAreHashed(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	long := strings.Repeat("x", 10_000)
	if k := s.RedisKey(long); len(k) > 300 || !strings.Contains(k, "sha256:") {
		t.Fatalf("redis key for a 10,000-byte key: %d bytes", len(k))
	}
	p := addrlimit.Policy{Burst: 1, Interval: time.Hour}
	if res, err := s.Take(context.Background(), long, p); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	if res, _ := s.Take(context.Background(), long+"y", p); !res.Allowed {
		t.Fatal("two long keys share a bucket")
	}
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
	if keys := keysWithPrefix(t, c, s.RedisKey("")); len(keys) != 0 {
		t.Fatalf("exempt traffic wrote keys %v", keys)
	}
}

func TestDenyCacheSparesRedis(t *testing.T) {
	needRedis(t)
	for _, tc := range []struct {
		name   string
		opts   []redisstore.Option
		calls  int64
		cached int
	}{
		{"with cache", nil, 2, 1},
		{"without cache", []redisstore.Option{redisstore.WithDenyCache(0)}, 102, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := shared.client(t)
			var calls counter
			c.AddHook(&calls)
			s := newStore(t, c, tc.opts...)
			p := addrlimit.Policy{Burst: 1, Interval: time.Hour}
			for i := range 102 {
				res, err := s.Take(context.Background(), "abuser", p)
				if err != nil || res.Allowed != (i == 0) {
					t.Fatalf("request %d: %+v %v", i, res, err)
				}
				if i > 0 && (res.RetryAfter <= 59*time.Minute || res.RetryAfter > time.Hour) {
					t.Fatalf("request %d: RetryAfter %v", i, res.RetryAfter)
				}
			}
			// EVALSHA per decision; the script is loaded by the first EVAL fallback.
			if n := calls.n.Load(); n < tc.calls || n > tc.calls+1 {
				t.Fatalf("%d script calls for 102 requests, want %d (+1 for loading the script)", n, tc.calls)
			}
			if n := s.DenyCacheLen(); n != tc.cached {
				t.Fatalf("deny cache holds %d keys, want %d", n, tc.cached)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	noCtx := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noCtx.Close()
	tests := []struct {
		name    string
		client  redis.UniversalClient
		opts    []redisstore.Option
		wantErr string
	}{
		{"nil client", nil, nil, "nil client"},
		{"context timeouts off", noCtx, nil, "ContextTimeoutEnabled"},
		{"zero timeout", ok, []redisstore.Option{redisstore.WithTimeout(0)}, "timeout must be positive"},
		{"negative deny cache", ok, []redisstore.Option{redisstore.WithDenyCache(-1)}, "must not be negative"},
		{"nil option", ok, []redisstore.Option{nil}, "option 1 is nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redisstore.New(tc.client, tc.opts...)
			if err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	s, _ := redisstore.New(ok)
	if _, err := s.Take(context.Background(), "k", addrlimit.Policy{}); err == nil {
		t.Fatal("zero policy accepted")
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
	_, err = s.Take(context.Background(), "k", addrlimit.Policy{Burst: 1, Interval: time.Second})
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

// Kill Redis mid-run: each failure policy does what it says, and once Redis
// is back the shared budget applies again without a restart.
func TestRedisOutageAndRecovery(t *testing.T) {
	needRedis(t)
	srv, err := newRedisServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	policies := []struct {
		policy addrlimit.FailurePolicy
		during string // codes of 4 requests while Redis is down
	}{
		{addrlimit.FailLocal, "[200 200 429 429]"},
		{addrlimit.FailOpen, "[200 200 200 200]"},
		{addrlimit.FailClosed, "[503 503 503 503]"},
	}
	type instance struct {
		h        http.Handler
		degraded *atomic.Int64
	}
	mk := func(p addrlimit.FailurePolicy, prefix string) instance {
		s, err := redisstore.New(srv.client(t), redisstore.WithKeyPrefix(prefix), redisstore.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var degraded atomic.Int64
		lim, _ := addrlimit.New(2, time.Hour, addrlimit.WithStore(s), addrlimit.WithStoreFailure(p),
			addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) {
				if d.Degraded && d.Err != nil {
					degraded.Add(1)
				}
			}))
		return instance{lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), &degraded}
	}
	codes := func(h http.Handler, remote string, n int) (string, []string) {
		var got []int
		var bodies []string
		for range n {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req(remote))
			got = append(got, w.Code)
			bodies = append(bodies, w.Body.String())
		}
		return fmt.Sprint(got), bodies
	}
	for _, pc := range policies {
		t.Run(pc.policy.String(), func(t *testing.T) {
			prefix := fmt.Sprintf("outage:%s:", pc.policy)
			a, b := mk(pc.policy, prefix), mk(pc.policy, prefix)
			if got, _ := codes(a.h, "192.0.2.1:1", 1); got != "[200]" {
				t.Fatalf("before the outage: %s", got)
			}
			srv.stop()
			got, bodies := codes(a.h, "192.0.2.2:1", 4)
			if got != pc.during {
				t.Fatalf("during the outage: %s, want %s", got, pc.during)
			}
			for _, body := range bodies {
				if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "refused") || strings.Contains(body, "redis") {
					t.Fatalf("error detail reached the client: %q", body)
				}
			}
			if a.degraded.Load() != 4 {
				t.Fatalf("observer saw %d degraded decisions, want 4", a.degraded.Load())
			}
			if err := srv.start(); err != nil {
				t.Fatal(err)
			}
			// Redis is back (empty, without persistence): both instances share
			// one budget of 2 again.
			got1, _ := codes(a.h, "192.0.2.3:1", 1)
			got2, _ := codes(b.h, "192.0.2.3:1", 2)
			if got1 != "[200]" || got2 != "[200 429]" {
				t.Fatalf("after recovery: %s %s, want one budget of 2 shared by both instances", got1, got2)
			}
		})
	}
}

func benchmarkParallel(b *testing.B, goroutinesPerCPU int) {
	needRedis(b)
	c := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, PoolSize: 128})
	defer c.Close()
	s := newStore(b, c)
	p := addrlimit.Policy{Burst: 1 << 30, Interval: time.Microsecond}
	var next atomic.Int64
	b.SetParallelism(goroutinesPerCPU)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := next.Add(1) * 7919
		for pb.Next() {
			if _, err := s.Take(ctx, fmt.Sprint("198.51.100.", i%250), p); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// Concurrency 1, 16 and 64 on this 2-core machine: SetParallelism multiplies
// GOMAXPROCS.
func BenchmarkTake(b *testing.B) {
	b.Run("concurrency=1", func(b *testing.B) {
		needRedis(b)
		c := shared.client(b)
		s := newStore(b, c)
		p := addrlimit.Policy{Burst: 1 << 30, Interval: time.Microsecond}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Take(context.Background(), "198.51.100.1", p); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	b.Run("concurrency=16", func(b *testing.B) { benchmarkParallel(b, 16/max(1, runtimeProcs())) })
	b.Run("concurrency=64", func(b *testing.B) { benchmarkParallel(b, 64/max(1, runtimeProcs())) })
}
