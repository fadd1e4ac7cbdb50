package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// counter is a go-redis hook that counts the script calls sent (EVALSHA and
// EVAL; connection set-up commands are not decisions), the keys they carry
// and the pipelines that carry them. gate, when set, is called before each
// script call is sent.
type counter struct {
	n, keys, pipes atomic.Int64
	gate           func(keys int64)
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		before := c.n.Load()
		for _, cmd := range cmds {
			c.count(cmd)
		}
		if c.n.Load() != before {
			c.pipes.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) count(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return
	}
	keys, _ := cmd.Args()[2].(int)
	c.n.Add(1)
	c.keys.Add(int64(keys))
	if c.gate != nil {
		c.gate(int64(keys))
	}
}

// testTimeout is the store timeout of tests that count exact decisions: far
// above any round trip on a loaded machine under the race detector, so that
// no decision is degraded.
const testTimeout = 5 * time.Second

func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithTimeout(testTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countedStore returns a client of the shared Redis that counts script
// calls, and a store on it.
func countedStore(t testing.TB, opts ...redisstore.Option) (*redis.Client, *counter, *redisstore.Store) {
	t.Helper()
	needRedis(t)
	c := shared.client(t)
	calls := new(counter)
	c.AddHook(calls)
	return c, calls, newStore(t, c, opts...)
}

// holdTwo makes the first two script calls sent through calls wait, each
// until its release channel is closed; later ones pass. The key count of
// every script call goes to started as it is sent. Releasing the first,
// then reading started, gives the queue's batch before the second can
// take part of it.
func holdTwo(calls *counter) (started chan int64, release [2]chan struct{}) {
	started = make(chan int64, 16)
	release = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var seen atomic.Int64
	calls.gate = func(keys int64) {
		i := seen.Add(1) - 1
		started <- keys
		if i < 2 {
			<-release[i]
		}
	}
	return started, release
}

var prefixes atomic.Int64

// testPrefix returns a key prefix no other test (nor another -count run,
// nor a synctest bubble, whose clock starts at the same instant every time)
// uses.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("test:%s:%d:%d:", t.Name(), os.Getpid(), prefixes.Add(1))
}

func keysWithPrefix(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

type takeFunc func(key string, p addrlimit.Policy, n int) store.Result

func taker(t testing.TB, s *redisstore.Store) takeFunc {
	return func(key string, p addrlimit.Policy, n int) store.Result {
		t.Helper()
		res, err := s.Take(context.Background(), key, p, n)
		if err != nil {
			t.Fatalf("Take(%q, %+v, %d): %v", key, p, n, err)
		}
		return res
	}
}

var (
	global = addrlimit.Policy{Name: "global", Limits: []addrlimit.Limit{{Burst: 100, Interval: 10 * time.Millisecond}}}
	login  = addrlimit.Policy{Name: "login", Limits: []addrlimit.Limit{{Burst: 5, Interval: 12 * time.Second}}}
)

// Stacked limiters at the Store level: a global 100/s policy and a
// 5/min login policy on one store never share a bucket, and neither do
// policies that differ only in name, burst or interval.
func TestPoliciesHaveDistinctBuckets(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	prefix := testPrefix(t)
	s := newStore(t, c, redisstore.WithKeyPrefix(prefix))
	take := taker(t, s)
	const addr = "198.51.100.7"
	for i := range 3 {
		if res := take(addr, login, 1); !res.Allowed || res.Remaining != 4-i {
			t.Fatalf("login %d: %+v", i+1, res)
		}
	}
	for i := range 5 {
		if res := take(addr, global, 1); !res.Allowed || res.Remaining < 99-i-1 {
			t.Fatalf("API call %d after 3 logins: %+v, want the global bucket untouched by logins", i+1, res)
		}
	}
	if res := take(addr, login, 2); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("logins 4-5: %+v", res)
	}
	for _, p := range []addrlimit.Policy{
		{Name: "login2", Limits: []addrlimit.Limit{{Burst: login.Limits[0].Burst, Interval: login.Limits[0].Interval}}},
		{Name: login.Name, Limits: []addrlimit.Limit{{Burst: login.Limits[0].Burst + 1, Interval: login.Limits[0].Interval}}},
		{Name: login.Name, Limits: []addrlimit.Limit{{Burst: login.Limits[0].Burst, Interval: login.Limits[0].Interval + time.Nanosecond}}},
		{Limits: []addrlimit.Limit{{Burst: login.Limits[0].Burst, Interval: login.Limits[0].Interval}}},
	} {
		if res := take(addr, p, 1); !res.Allowed || res.Remaining != p.Limits[0].Burst-1 {
			t.Fatalf("policy %+v shares the login bucket: %+v", p, res)
		}
	}
	// Equal policies share buckets, also across instances: that is the fleet.
	other := taker(t, newStore(t, shared.client(t), redisstore.WithKeyPrefix(prefix)))
	if res := other(addr, login, 1); res.Allowed {
		t.Fatalf("6th login, through another instance, allowed: %+v", res)
	}
	if keys := keysWithPrefix(t, c, prefix); len(keys) != 6 {
		t.Fatalf("Redis keys %v, want one per policy (6)", keys)
	}
}

// A literal key never reaches the Redis key of a hashed long key, whatever
// it looks like; two long keys do not share a bucket.
func TestHashedKeysHaveTheirOwnNamespace(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	take := taker(t, s)
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}}
	long := strings.Repeat("x", 10_000)
	hashed := s.RedisKey(long, p)
	if len(hashed) > 300 || !strings.Contains(hashed, ":h:") {
		t.Fatalf("Redis key of a 10,000-byte key: %q", hashed)
	}
	hexsum := hashed[strings.LastIndex(hashed, ":")+1:]
	if res := take(long, p, 1); !res.Allowed {
		t.Fatal(res)
	}
	for _, literal := range []string{hexsum, "h:" + hexsum, ":h:" + hexsum, "sha256:" + hexsum, strings.Repeat("x", 200)} {
		if k := s.RedisKey(literal, p); k == hashed {
			t.Fatalf("literal key %q maps to the hashed key", literal)
		}
		if res := take(literal, p, 1); !res.Allowed {
			t.Fatalf("literal key %q shares the long key's bucket", literal)
		}
	}
	if res := take(long+"y", p, 1); !res.Allowed {
		t.Fatal("two long keys share a bucket")
	}
	if res := take(long, p, 1); res.Allowed {
		t.Fatal("the long key's bucket was not kept")
	}
}

// Take of n, Peek, Refund and Reset on one bucket, and the deny cache: a
// Refund or a Reset ends a cached denial at once.
func TestRefundAndResetEndCachedDenials(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	take := taker(t, s)
	ctx := context.Background()
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Hour}}}
	if res := take("k", p, 2); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("Take 2: %+v", res)
	}
	if res, err := s.Peek(ctx, "k", p); err != nil || !res.Allowed || res.Remaining != 1 || res.RetryAfter != 0 {
		t.Fatalf("Peek: %+v %v", res, err)
	}
	if res := take("k", p, 2); res.Allowed || res.Remaining != 1 || res.RetryAfter <= 59*time.Minute || res.RetryAfter > time.Hour {
		t.Fatalf("Take 2 of 1 left: %+v, want denied, 1 left, RetryAfter about 1h", res)
	}
	if n := s.DenyCacheLen(); n != 1 {
		t.Fatalf("the denial of 2 with 1 left was not cached (%d entries)", n)
	}
	// The cached denial does not stop a Take the bucket can pay.
	if res := take("k", p, 1); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("last token: %+v", res)
	}
	if res := take("k", p, 1); res.Allowed || s.DenyCacheLen() != 1 {
		t.Fatalf("empty bucket: %+v, deny cache %d", res, s.DenyCacheLen())
	}
	res, err := s.Refund(ctx, "k", p, 1)
	if err != nil || !res.Allowed || res.Remaining != 1 || s.DenyCacheLen() != 0 {
		t.Fatalf("Refund 1: %+v %v, deny cache %d", res, err, s.DenyCacheLen())
	}
	if res := take("k", p, 1); !res.Allowed {
		t.Fatalf("Take after the refund: %+v", res)
	}
	if res := take("k", p, 1); res.Allowed || s.DenyCacheLen() != 1 {
		t.Fatalf("empty again: %+v, deny cache %d", res, s.DenyCacheLen())
	}
	if err := s.Reset(ctx, "k", p); err != nil || s.DenyCacheLen() != 0 {
		t.Fatalf("Reset: %v, deny cache %d", err, s.DenyCacheLen())
	}
	if n, err := c.Exists(ctx, s.RedisKey("k", p)).Result(); err != nil || n != 0 {
		t.Fatalf("Reset left the key (%d, %v)", n, err)
	}
	if res, err := s.Peek(ctx, "k", p); err != nil || res.Remaining != 3 || res.ResetAfter != 0 {
		t.Fatalf("Peek after Reset: %+v %v", res, err)
	}
	// Refunds never fill a bucket above full, and a full bucket has no key.
	take("k", p, 1)
	if res, err := s.Refund(ctx, "k", p, 3); err != nil || res.Remaining != 3 || res.ResetAfter != 0 {
		t.Fatalf("Refund 3 of a bucket missing 1: %+v %v", res, err)
	}
	if n, _ := c.Exists(ctx, s.RedisKey("k", p)).Result(); n != 0 {
		t.Fatal("a refund to full left the key")
	}
	if err := s.Reset(ctx, "never-seen", p); err != nil {
		t.Fatalf("Reset of a missing key: %v", err)
	}
}

func TestKeysExpireOnceFull(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 3, Interval: 100 * time.Millisecond}}}
	ctx := context.Background()
	taker(t, s)("k", p, 2)
	ttl, err := c.PTTL(ctx, s.RedisKey("k", p)).Result()
	if err != nil || ttl <= 0 || ttl > 200*time.Millisecond {
		t.Fatalf("PTTL = %v, %v; want the time to a full bucket (at most 200ms)", ttl, err)
	}
	time.Sleep(ttl + 50*time.Millisecond) // the bucket is full again: Redis's clock, nothing to inject
	if n, err := c.Exists(ctx, s.RedisKey("k", p)).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after the bucket refilled (%d, %v)", n, err)
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
			p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}}
			for i := range 102 {
				res, err := s.Take(context.Background(), "abuser", p, 1)
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

// A denied Take whose cost exceeds what is left is answered by the deny
// cache too, with Redis's RetryAfter: a flood of expensive requests costs
// one round trip, while a cost the bucket can pay still reaches Redis.
func TestDenyCacheAnswersDenialsOfAnyCost(t *testing.T) {
	_, calls, s := countedStore(t)
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Hour}}}
	take := taker(t, s)
	if res := take("k", p, 3); !res.Allowed || res.Remaining != 2 {
		t.Fatalf("Take of 3 from a full bucket: %+v", res)
	}
	first := take("k", p, 3)
	before := calls.n.Load()
	for i := range 100 {
		res := take("k", p, 3)
		if res.Allowed || res.Remaining != 2 || res.RetryAfter > first.RetryAfter || res.RetryAfter < first.RetryAfter-time.Minute {
			t.Fatalf("Take %d of 3 with 2 left: %+v, first denial %+v", i+1, res, first)
		}
	}
	if n := calls.n.Load() - before; n != 0 {
		t.Fatalf("%d script calls for 100 denied Takes of 3 with 2 left, want 0 (the deny cache knows)", n)
	}
	if res := take("k", p, 2); !res.Allowed || res.Remaining != 0 || calls.n.Load() != before+1 {
		t.Fatalf("Take of 2 with 2 left: %+v, %d script calls, want allowed by Redis", res, calls.n.Load()-before)
	}
}

// Calls that arrive while two script calls are in flight go together in
// the next one: one script call carrying all their keys.
func TestConcurrentCallsShareOneRoundTrip(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c)
	// Load the script first, so that no EVAL fallback doubles a call.
	if err := s.Reset(context.Background(), "warm-up", global); err != nil {
		t.Fatal(err)
	}
	calls.n.Store(0)
	started, release := holdTwo(&calls)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			if res, err := s.Take(context.Background(), fmt.Sprint("k", i), global, 1); err != nil || !res.Allowed {
				t.Errorf("Take %d: %+v %v", i, res, err)
			}
		})
		if i == 1 { // the first two are in flight, held by the gate
			<-started
			<-started
		}
	}
	for s.QueuedCalls() != 10 {
		time.Sleep(time.Millisecond) // waiting for a state, not for a duration
	}
	close(release[0])
	if keys := <-started; keys != 10 {
		t.Fatalf("the next script call carried %d keys, want the 10 queued calls", keys)
	}
	close(release[1])
	wg.Wait()
	if n := calls.n.Load(); n != 3 {
		t.Fatalf("%d script calls, want 3 (two in flight, one batch)", n)
	}
}

// A queued caller whose context ends leaves the queue at once with its
// context's error, and the next batch carries the others without it.
func TestQueuedCallerThatGivesUpLeavesTheBatch(t *testing.T) {
	_, calls, s := countedStore(t)
	if err := s.Reset(context.Background(), "warm-up", global); err != nil { // loads the script
		t.Fatal(err)
	}
	calls.n.Store(0)
	started, release := holdTwo(calls)
	var wg sync.WaitGroup
	for i := range 2 { // in flight, held by the gate
		wg.Go(func() { _, _ = s.Take(context.Background(), fmt.Sprint("held", i), global, 1) })
		<-started
	}
	quitter, quit := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := s.Take(quitter, "quitter", global, 1)
		gaveUp <- err
	}()
	for s.QueuedCalls() != 1 {
		time.Sleep(time.Millisecond) // waiting for a state, not for a duration
	}
	for i := range 5 {
		wg.Go(func() {
			if res, err := s.Take(context.Background(), fmt.Sprint("k", i), global, 1); err != nil || !res.Allowed {
				t.Errorf("Take %d: %+v %v", i, res, err)
			}
		})
	}
	for s.QueuedCalls() != 6 {
		time.Sleep(time.Millisecond) // waiting for a state, not for a duration
	}
	quit()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued caller that gave up: %v, want context.Canceled", err)
	}
	if n := s.QueuedCalls(); n != 5 {
		t.Fatalf("%d calls queued after one gave up, want 5", n)
	}
	close(release[0])
	if keys := <-started; keys != 5 {
		t.Fatalf("the next script call carried %d keys, want the 5 still queued", keys)
	}
	close(release[1])
	wg.Wait()
	if n := calls.n.Load(); n != 3 {
		t.Fatalf("%d script calls, want 3 (two in flight, one batch)", n)
	}
}

// The production script reads only Redis TIME: a time passed after the
// arguments (as the tests' script takes it) changes nothing.
func TestProductionScriptTakesNoTimeFromItsCaller(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	ctx := context.Background()
	key := testPrefix(t) + "k"
	const interval = 1_000_000 // µs
	if err := redisstore.RunScript(ctx, c, key, 0, 1, 4, 1, interval, 10, 1); err != nil {
		t.Fatal(err)
	}
	tat, err := c.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := now.UnixMicro() + interval - tat; d < 0 || d > 60_000_000 {
		t.Fatalf("bucket's TAT %d µs is %d µs from Redis TIME + one interval, want within a minute: the script took the caller's time", tat, d)
	}
}

// A policy whose burst × interval is past what the script computes exactly
// (2^50 µs, about 35.7 years) is refused when the Limiter is built, with an
// error that names the bound; one just inside it decides in Redis.
func TestNewRefusesPoliciesPastTheScriptBound(t *testing.T) {
	needRedis(t)
	s := newStore(t, shared.client(t))
	const year = 8766 * time.Hour // 365.25 days
	_, err := addrlimit.New(1, 36*year, addrlimit.WithStore(s))
	if err == nil || !strings.Contains(err.Error(), "35.7 years") {
		t.Fatalf("New(1 per 36 years): %v, want an error naming the bound", err)
	}
	if _, err := addrlimit.New(2, 72*year, addrlimit.WithStore(s)); err == nil {
		t.Fatal("New(2 per 72 years) accepted")
	}
	lim, err := addrlimit.New(1, 35*year, addrlimit.WithStore(s), addrlimit.WithStoreFailure(addrlimit.FailClosed))
	if err != nil {
		t.Fatalf("New(1 per 35 years): %v", err)
	}
	for i, want := range []bool{true, false} {
		d := lim.AllowKey(context.Background(), "", "k", 1)
		if d.Degraded || (d.Outcome == addrlimit.Allowed) != want {
			t.Fatalf("decision %d: %+v, want allowed %v by Redis", i+1, d, want)
		}
	}
}

// A foreign value of another type at one bucket's key (WRONGTYPE) fails
// that key's decisions only: the other calls of its batch are answered, and
// the circuit stays closed, since Redis answered.
func TestOneBadKeyFailsOnlyItself(t *testing.T) {
	c, calls, s := countedStore(t)
	ctx := context.Background()
	if err := c.LPush(ctx, s.RedisKey("bad", global), "foreign").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, "warm-up", global); err != nil { // loads the script
		t.Fatal(err)
	}
	started, release := holdTwo(calls)
	const good = 30
	var wg sync.WaitGroup
	var goodErrs, badErrs atomic.Int64
	take := func(key string, bad bool) {
		res, err := s.Take(ctx, key, global, 1)
		switch {
		case bad && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE")):
			t.Errorf("Take of the bad key: %+v %v, want its WRONGTYPE error", res, err)
		case bad:
			badErrs.Add(1)
		case err != nil:
			goodErrs.Add(1)
			t.Errorf("Take(%q) batched with a bad key: %v", key, err)
		case !res.Allowed:
			t.Errorf("Take(%q): %+v", key, res)
		}
	}
	// Two calls in flight, held; then the bad key and the good ones queue
	// and go in one script call.
	for i := range 2 {
		wg.Go(func() { take(fmt.Sprint("held", i), false) })
		<-started
	}
	for i := range good + 3 {
		if i%11 == 5 {
			wg.Go(func() { take("bad", true) })
		} else {
			wg.Go(func() { take(fmt.Sprint("k", i), false) })
		}
	}
	for s.QueuedCalls() != good+3 {
		time.Sleep(time.Millisecond) // waiting for a state, not for a duration
	}
	close(release[0])
	if keys := <-started; keys != good+3 {
		t.Fatalf("the next script call carried %d keys, want the %d queued calls", keys, good+3)
	}
	close(release[1])
	wg.Wait()
	if goodErrs.Load() != 0 || badErrs.Load() != 3 {
		t.Fatalf("%d of %d good calls failed, %d of 3 bad ones", goodErrs.Load(), good+2, badErrs.Load())
	}
	// Redis answered: no outage, the circuit is closed.
	if res, err := s.Take(ctx, "after", global, 1); err != nil || !res.Allowed {
		t.Fatalf("Take after the bad key's errors: %+v %v", res, err)
	}
}

// A Store refuses, before any round trip, a named policy that breaks the
// Limiter's rule (Policy.Validate), whoever calls it.
func TestStoreAppliesThePolicyRuleOfTheLimiter(t *testing.T) {
	needRedis(t)
	s := newStore(t, shared.client(t))
	for _, p := range []addrlimit.Policy{
		{Name: "bad name", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Second}}},
		{Name: strings.Repeat("a", 65), Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Second}}},
		{Name: "ok", Limits: []addrlimit.Limit{{Burst: 0, Interval: time.Second}}},
	} {
		if _, err := s.Take(context.Background(), "k", p, 1); err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("Take under %q (burst %d): %v, want a redisstore error", p.Name, p.Limits[0].Burst, err)
		} else if p.Validate() == nil {
			t.Errorf("policy %+v is valid by Policy.Validate, but the store refused it: %v", p, err)
		}
	}
}
