package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// tick is the step of the differential test's clock: 1/64 s. With refill
// intervals of 1/64 s times a power of two, every token count x/time/rate
// computes is a dyadic fraction, exact in a float64, so that the model
// decides exactly at every boundary, as the script's integer µs do.
const tick = time.Second / 64

// model is one key's buckets under a policy: one rate.Limiter per limit.
type model struct {
	lims []*rate.Limiter
	p    addrlimit.Policy
}

func newModel(p addrlimit.Policy, now time.Time) *model {
	m := &model{p: p}
	for _, lim := range p.Limits {
		l := rate.NewLimiter(rate.Every(lim.Interval), lim.Burst)
		l.SetBurstAt(now, lim.Burst) // full at now
		m.lims = append(m.lims, l)
	}
	return m
}

// take decides a Take of n at now, all or nothing: every limit is checked
// with TokensAt first, and charged with ReserveN only when all allow.
func (m *model) take(now time.Time, n int) bool {
	for _, l := range m.lims {
		if l.TokensAt(now) < float64(n) {
			return false
		}
	}
	for _, l := range m.lims {
		if r := l.ReserveN(now, n); !r.OK() || r.DelayFrom(now) != 0 {
			panic("model: reservation after TokensAt allowed it")
		}
	}
	return true
}

// resets returns each limit's time until full at now.
func (m *model) resets(now time.Time) [store.MaxLimits]time.Duration {
	var out [store.MaxLimits]time.Duration
	for i, l := range m.lims {
		missing := float64(m.p.Limits[i].Burst) - l.TokensAt(now)
		out[i] = time.Duration(math.Round(missing * float64(m.p.Limits[i].Interval)))
	}
	return out
}

// randomPolicy returns a policy of 1 to MaxLimits limits with intervals of
// 1/64 s to 4 s and bursts of 1 to 40.
func randomPolicy(rng *rand.Rand, name string) addrlimit.Policy {
	p := addrlimit.Policy{Name: name}
	k := 1 + rng.IntN(store.MaxLimits)
	for i := range k {
		p.Limits = append(p.Limits, addrlimit.Limit{
			Name:     fmt.Sprint("l", i),
			Burst:    1 + rng.IntN(40),
			Interval: tick << rng.IntN(9),
		})
	}
	return p
}

// differential runs decisions random Takes (random keys, policies of 1 to 4
// limits, costs up to the smallest burst, times in steps of 1/64 s) from 8
// goroutines through a store whose script runs on the bubble's clock, and
// compares each answer with one x/time/rate.Limiter per limit: the same
// decision, never a charge on a denial, and the same time until full for
// every limit, hence the same Remaining and RetryAfter. newClient is called
// inside the bubble.
func differential(t *testing.T, decisions int, newClient func(t testing.TB) redis.UniversalClient) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, newClient(t), redisstore.WithClock(time.Now))
		const workers, keysPerWorker = 8, 16
		var allowed, denied, multi atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				type bucket struct {
					key string
					m   *model
				}
				buckets := make([]bucket, keysPerWorker)
				for i := range buckets {
					p := randomPolicy(rng, fmt.Sprint("p", w, "-", i))
					buckets[i] = bucket{key: fmt.Sprintf("{client}%d}-%d", w, i), m: newModel(p, time.Now())}
				}
				for d := range decisions / workers {
					time.Sleep(time.Duration(rng.IntN(4)) * tick)
					b := buckets[rng.IntN(len(buckets))]
					p := b.m.p
					smallest := p.Limits[0].Burst
					for _, lim := range p.Limits {
						smallest = min(smallest, lim.Burst)
					}
					n := 1 + rng.IntN(smallest)
					now := time.Now()
					res, err := s.Take(context.Background(), b.key, p, n)
					if err != nil {
						t.Errorf("decision %d: %v", d, err)
						return
					}
					want := b.m.take(now, n)
					if res.Allowed != want {
						t.Errorf("decision %d, %s, cost %d at +%v: store allowed %v, x/time/rate %v", d, b.key, n, now.Sub(start), res.Allowed, want)
						return
					}
					need := 1
					if !want {
						need = n
					}
					if exp := p.Result(want, need, b.m.resets(now)); res != exp {
						t.Errorf("decision %d, %s (%d limits), cost %d: store %+v, x/time/rate %+v", d, b.key, len(p.Limits), n, res, exp)
						return
					}
					if res.Allowed {
						allowed.Add(1)
					} else {
						denied.Add(1)
					}
					if len(p.Limits) > 1 {
						multi.Add(1)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d decisions (%d allowed, %d denied; %d under several limits) equal to x/time/rate's", allowed.Load()+denied.Load(), allowed.Load(), denied.Load(), multi.Load())
		if got := allowed.Load() + denied.Load(); got != int64(decisions/workers*workers) || allowed.Load() == 0 || denied.Load() == 0 {
			t.Fatalf("%d decisions compared (%d allowed), want %d with both outcomes", got, allowed.Load(), decisions/workers*workers)
		}
	})
}

// start is the synctest bubble's epoch (every bubble starts there).
var start = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSeveralLimitsEqualXTimeRate(t *testing.T) {
	needRedis(t)
	decisions := 100_000
	if testing.Short() {
		decisions = 10_000
	}
	differential(t, decisions, func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// three is a policy of three limits that refill too slowly to change
// during a test: 2, 5 and 10 per hour-long interval.
var three = addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{
	{Name: "a", Burst: 2, Interval: time.Hour},
	{Name: "b", Burst: 5, Interval: time.Hour},
	{Name: "c", Burst: 10, Interval: time.Hour},
}}

// hours rounds each of res's Resets to whole hours (a few ms pass between
// calls on Redis's clock).
func hours(res store.Result) [3]int {
	var h [3]int
	for i := range h {
		h[i] = int(res.Resets[i].Round(time.Hour) / time.Hour)
	}
	return h
}

// Take, Peek, Refund, TakeWithDebt and Reset over every limit of a policy:
// a denial by one limit charges none, a refund and a debt reach every
// limit, a reset empties every key; the deny cache answers a denial by any
// limit and forgets it on a refund.
func TestSeveralLimitsAllOrNothing(t *testing.T) {
	c, calls, s := countedStore(t)
	ctx := context.Background()
	step := func(what string, res store.Result, err error, allowed bool, remaining int, resets [3]int) {
		t.Helper()
		if err != nil || res.Allowed != allowed || res.Remaining != remaining || hours(res) != resets {
			t.Fatalf("%s: %+v %v, want allowed %v, %d left, hours until full %v", what, res, err, allowed, remaining, resets)
		}
	}
	res, err := s.Take(ctx, "k", three, 2)
	step("Take 2", res, err, true, 0, [3]int{2, 2, 2})
	res, err = s.Take(ctx, "k", three, 1)
	step("Take 1, limit a empty", res, err, false, 0, [3]int{2, 2, 2})
	if res.RetryAfter <= 59*time.Minute || res.RetryAfter > time.Hour {
		t.Fatalf("RetryAfter %v, want limit a's hour", res.RetryAfter)
	}
	before := calls.n.Load()
	res, err = s.Take(ctx, "k", three, 1)
	step("Take 1 again", res, err, false, 0, [3]int{2, 2, 2})
	if n := calls.n.Load() - before; n != 0 || s.DenyCacheLen() != 1 {
		t.Fatalf("%d script calls for a denial the deny cache holds (%d entries), want 0", n, s.DenyCacheLen())
	}
	res, err = s.Peek(ctx, "k", three)
	step("Peek", res, err, false, 0, [3]int{2, 2, 2})
	res, err = s.Refund(ctx, "k", three, 1)
	step("Refund 1", res, err, true, 1, [3]int{1, 1, 1})
	if s.DenyCacheLen() != 0 {
		t.Fatal("a refund left the denial cached")
	}
	// A debt of 2 to every limit, then a Take of 1 that limit a (1 below
	// empty) denies: the debt stays, the Take charges none.
	res, err = s.TakeWithDebt(ctx, "k", three, 1, 2)
	step("TakeWithDebt(1, 2)", res, err, false, 0, [3]int{3, 3, 3})
	res, err = s.TakeWithDebt(ctx, "k", three, 1, 2)
	step("TakeWithDebt(1, 2) again: limit a at its bound", res, err, false, 0, [3]int{4, 5, 5})
	if err := s.Reset(ctx, "k", three); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.RedisKey("k", three)).Result(); err != nil || n != 0 {
		t.Fatalf("Reset left the key (%d, %v)", n, err)
	}
	res, err = s.Peek(ctx, "k", three)
	step("Peek after Reset", res, err, true, 2, [3]int{0, 0, 0})
}

// The buckets of one decision are one Redis key (one slot in a Cluster,
// whatever the key holds); different policies, limit lists or keys never
// share a Redis key; a policy of one limit keeps the key of earlier
// versions, so that a deploy keeps its buckets.
func TestSeveralLimitsOneKey(t *testing.T) {
	c, _, s := countedStore(t)
	ctx := context.Background()
	one := addrlimit.Policy{Name: "api", Limits: three.Limits[:1]}
	s2, err := redisstore.New(c, redisstore.WithKeyPrefix("addrlimit:"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s2.RedisKey("198.51.100.7", one), "addrlimit:api/2/3600000000000:k:198.51.100.7"; got != want {
		t.Fatalf("one limit: key %q, want %q as before", got, want)
	}
	long := string(make([]byte, 300))
	seen := map[string]string{}
	for _, p := range []addrlimit.Policy{one, three, {Name: "api", Limits: three.Limits[:2]}, {Name: "api2", Limits: three.Limits[:2]},
		{Name: "api", Limits: []addrlimit.Limit{three.Limits[1], three.Limits[0]}}} {
		for _, key := range []string{"198.51.100.7", "}", "{", "{}", "}x{y}", "a}b", "", "/2/3600000000000:k:x", long, long + "x"} {
			rkey := s.RedisKey(key, p)
			if other, dup := seen[rkey]; dup {
				t.Fatalf("%q under %v has the Redis key of %s", key, p, other)
			}
			seen[rkey] = fmt.Sprintf("%q under %v", key, p)
		}
	}
	// One Take of three limits writes one key, which holds each limit's TAT.
	if res, err := s.Take(ctx, "k", three, 1); err != nil || !res.Allowed {
		t.Fatalf("Take: %+v %v", res, err)
	}
	v, err := c.Get(ctx, s.RedisKey("k", three)).Result()
	if err != nil || len(v) != 3*8 {
		t.Fatalf("the key holds %q (%v), want three TATs of 8 bytes", v, err)
	}
	// It expires when the last of its buckets is full.
	mixed := addrlimit.Policy{Name: "mixed", Limits: []addrlimit.Limit{{Name: "s", Burst: 10, Interval: time.Second}, {Name: "h", Burst: 10, Interval: time.Hour}}}
	if res, err := s.Take(ctx, "k", mixed, 2); err != nil || !res.Allowed {
		t.Fatalf("Take: %+v %v", res, err)
	}
	ttl, err := c.PTTL(ctx, s.RedisKey("k", mixed)).Result()
	if err != nil || ttl <= 2*time.Hour-time.Minute || ttl > 2*time.Hour+time.Second {
		t.Fatalf("PTTL %v (%v), want the hour limit's 2 h until full", ttl, err)
	}
}

// A foreign value of another type at a decision's key fails that decision
// only (WRONGTYPE), and leaves the value as it was.
func TestSeveralLimitsOneBadKeyWritesNothing(t *testing.T) {
	c, _, s := countedStore(t)
	ctx := context.Background()
	key := s.RedisKey("bad", three)
	if err := c.LPush(ctx, key, "foreign").Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Take(ctx, "bad", three, 1); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Take with a list at the key: %+v %v, want WRONGTYPE", res, err)
	}
	if v, err := c.LRange(ctx, key, 0, -1).Result(); err != nil || len(v) != 1 || v[0] != "foreign" {
		t.Fatalf("the failed decision changed the list: %q %v", v, err)
	}
	if res, err := s.Take(ctx, "good", three, 1); err != nil || !res.Allowed {
		t.Fatalf("Take of another key: %+v %v", res, err)
	}
}

// A Redis at maxmemory under noeviction refuses a decision's first write:
// a decision of several limits fails whole (OOM) and writes none of them.
func TestSeveralLimitsFullRedisWritesNothing(t *testing.T) {
	srv := startServer(t, "--maxmemory-policy", "noeviction")
	c := srv.client(t)
	fillRedis(t, c)
	s := newStore(t, c)
	ctx := context.Background()
	if res, err := s.Take(ctx, "newcomer", three, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Take in a full Redis: %+v %v, want OOM", res, err)
	}
	if n, err := c.Exists(ctx, s.RedisKey("newcomer", three)).Result(); err != nil || n != 0 {
		t.Fatalf("the refused decision wrote its key (%d, %v)", n, err)
	}
}

// Two instances of a Limiter with 5 per hour and 3 per day, on one Redis,
// 400 concurrent requests from one client: exactly the day's 3 pass, and
// the hour limit is charged those 3 only, never a denied request.
func TestSeveralLimitsThroughAFleet(t *testing.T) {
	needRedis(t)
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	fleet := []*instance{
		newInstance(t, shared.client(t), 5, time.Hour, []redisstore.Option{prefix}, addrlimit.WithLimit(3, 24*time.Hour)),
		newInstance(t, shared.client(t), 5, time.Hour, []redisstore.Option{prefix}, addrlimit.WithLimit(3, 24*time.Hour)),
	}
	if got := hammer(t, fleet, "198.51.100.7:1", 10); got != 3 {
		t.Fatalf("allowed %d of 400 across two instances, want exactly the day's 3", got)
	}
	for _, in := range fleet {
		if errs := in.degraded(); len(errs) > 0 {
			t.Fatalf("degraded decisions: %v", errs)
		}
	}
	p := fleet[0].lim.Policies()[0]
	res, err := fleet[0].store.Peek(context.Background(), "198.51.100.7", p)
	if err != nil {
		t.Fatal(err)
	}
	if h := res.Resets[0]; h < 35*time.Minute || h > 36*time.Minute {
		t.Fatalf("the hour limit is full in %v, want about 36 min (3 of 5 per hour charged): %+v", h, res)
	}
	if d := res.Resets[1]; d < 24*time.Hour-time.Minute || d > 24*time.Hour {
		t.Fatalf("the day limit is full in %v, want 24 h (3 of 3 charged): %+v", d, res)
	}
}

// CheckPolicy accepts up to MaxLimits limits, and refuses a policy any of
// whose limits is past the script's exact arithmetic (2^50 µs), naming it.
func TestSeveralLimitsCheckPolicy(t *testing.T) {
	needRedis(t)
	s := newStore(t, shared.client(t))
	const year = 8766 * time.Hour
	four := addrlimit.Policy{Name: "four", Limits: append(append([]addrlimit.Limit(nil), three.Limits...), addrlimit.Limit{Name: "d", Burst: 1, Interval: 35 * year})}
	if err := s.CheckPolicy(four); err != nil {
		t.Fatalf("four limits, each within the bound: %v", err)
	}
	past := addrlimit.Policy{Name: "past", Limits: []addrlimit.Limit{three.Limits[0], {Name: "y", Burst: 1, Interval: 36 * year}}}
	if err := s.CheckPolicy(past); err == nil || !strings.Contains(err.Error(), "35.7 years") {
		t.Fatalf("a second limit of 1 per 36 years: %v, want an error naming the bound", err)
	}
	five := addrlimit.Policy{Name: "five", Limits: append(append([]addrlimit.Limit(nil), four.Limits...), addrlimit.Limit{Name: "e", Burst: 1, Interval: time.Second})}
	if err := s.CheckPolicy(five); err == nil {
		t.Fatal("five limits accepted")
	}
	if _, err := s.Take(context.Background(), "k", four, 1); err != nil {
		t.Fatalf("Take under four limits: %v", err)
	}
}
