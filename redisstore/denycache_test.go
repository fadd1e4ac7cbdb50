package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// A flood of limited keys cannot grow the deny cache past its size, and
// entries whose denial is over are dropped.
func TestDenyCacheIsBounded(t *testing.T) {
	c := newDenyCache(100)
	now := time.Unix(1_700_000_000, 0)
	// Burst 60 of 1/s, empty: one token in 1s.
	denied := store.Result{RetryAfter: time.Second, ResetAfter: time.Minute}
	for i := range 10_000 {
		c.remember(fmt.Sprint("k", i), now, one(denied), 1, pol(60, time.Second))
	}
	if n := c.len(); n != 100 {
		t.Fatalf("cache holds %d keys after a flood, want its size 100", n)
	}
	if res, ok := c.lookup("k5", now.Add(400*time.Millisecond), 1, pol(60, time.Second)); !ok || res.Allowed || res.RetryAfter != 600*time.Millisecond {
		t.Fatalf("lookup of a cached key: %+v %v", res, ok)
	}
	if _, ok := c.lookup("k9999", now, 1, pol(60, time.Second)); ok {
		t.Fatal("a key remembered past the size was cached")
	}
	// Once the denials are over, a full cache makes room (sweeping at most
	// once per sweepEvery).
	later := now.Add(2 * time.Second)
	c.remember("new", later, one(denied), 1, pol(60, time.Second))
	if _, ok := c.lookup("new", later, 1, pol(60, time.Second)); !ok || c.len() != 1 {
		t.Fatalf("expired entries not swept: len %d", c.len())
	}
	// Expired entries are never served.
	if _, ok := c.lookup("k5", later, 1, pol(60, time.Second)); ok {
		t.Fatal("expired denial served")
	}
	// A denial without a wait is not cached; a nil cache is a no-op.
	c.remember("zero", later, one(store.Result{}), 1, pol(60, time.Second))
	if _, ok := c.lookup("zero", later, 1, pol(60, time.Second)); ok {
		t.Fatal("zero RetryAfter cached")
	}
	var off *denyCache
	off.remember("k", now, one(denied), 1, pol(60, time.Second))
	if _, ok := off.lookup("k", now, 1, pol(60, time.Second)); ok || off.len() != 0 {
		t.Fatal("disabled cache remembered")
	}
}

// A denial caches the bucket's state: every Take whose cost that state
// proves unavailable is denied locally, whatever the cost that was denied,
// with the RetryAfter Redis would give; Takes it cannot prove denied go to
// Redis. An entry lasts one interval at most; an allowed answer updates a
// remembered state; forget drops an entry.
func TestDenyCacheDeniesEveryCostItCanProve(t *testing.T) {
	c := newDenyCache(10)
	now := time.Unix(1_700_000_000, 0)
	// Burst 5 of 1/s, full again in 3.6s: 1.4 tokens. A Take of 3 is denied
	// (RetryAfter 1.6s) with 1 left.
	c.remember("k", now, one(store.Result{Remaining: 1, RetryAfter: 1600 * time.Millisecond, ResetAfter: 3600 * time.Millisecond}), 3, pol(5, time.Second))
	for _, tc := range []struct {
		at     time.Duration
		n      int
		denied bool
		retry  time.Duration
		left   int
	}{
		{0, 1, false, 0, 0}, // 1.4 tokens: a Take of 1 goes to Redis
		{0, 2, true, 600 * time.Millisecond, 1},
		{0, 3, true, 1600 * time.Millisecond, 1},
		{0, 5, true, 3600 * time.Millisecond, 1},
		{700 * time.Millisecond, 2, false, 0, 0},
		{700 * time.Millisecond, 3, true, 900 * time.Millisecond, 2},
		{999 * time.Millisecond, 5, true, 2601 * time.Millisecond, 2},
		{time.Second, 5, false, 0, 0}, // one interval later: asks Redis again
	} {
		res, ok := c.lookup("k", now.Add(tc.at), tc.n, pol(5, time.Second))
		if ok != tc.denied || ok && (res.Allowed || res.Remaining != tc.left || res.RetryAfter != tc.retry || res.ResetAfter != 3600*time.Millisecond-tc.at) {
			t.Fatalf("Take of %d at +%v: %+v %v, want denied %v with %d left, RetryAfter %v", tc.n, tc.at, res, ok, tc.denied, tc.left, tc.retry)
		}
	}
	if c.len() != 0 {
		t.Fatal("entry kept past one interval")
	}
	// Empty, then an allowed answer (through this store, after a refund
	// elsewhere, say) updates the state: full again in 2s, so 3 tokens.
	c.remember("k", now, one(store.Result{RetryAfter: 2 * time.Second, ResetAfter: 6 * time.Second}), 2, pol(5, time.Second))
	if _, ok := c.lookup("k", now, 1, pol(5, time.Second)); !ok {
		t.Fatal("empty bucket not denied")
	}
	c.remember("k", now, one(store.Result{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}), 1, pol(5, time.Second))
	if res, ok := c.lookup("k", now, 4, pol(5, time.Second)); !ok || res.Remaining != 3 || res.RetryAfter != time.Second {
		t.Fatalf("Take of 4 after the update: %+v %v", res, ok)
	}
	if _, ok := c.lookup("k", now, 3, pol(5, time.Second)); ok {
		t.Fatal("Take of 3 denied with 3 tokens")
	}
	c.forget("k")
	if _, ok := c.lookup("k", now, 5, pol(5, time.Second)); ok {
		t.Fatal("forgotten key still denied")
	}
}

// pol is a policy of one limit.
func pol(burst int, interval time.Duration) addrlimit.Policy {
	return addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: burst, Interval: interval}}}
}

// one is res of a policy of one limit, with its Resets filled in.
func one(res store.Result) store.Result {
	res.Resets[0] = res.ResetAfter
	return res
}

// With several limits, a denial is remembered with every limit's state:
// a Take that any limit cannot pay yet is denied locally, with the longest
// wait; one every limit can pay goes to Redis.
func TestDenyCacheProvesAcrossEveryLimit(t *testing.T) {
	c := newDenyCache(10)
	now := time.Unix(1_700_000_000, 0)
	p := addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{
		{Name: "s", Burst: 5, Interval: time.Second}, // full in 1s: 4 tokens
		{Name: "h", Burst: 3, Interval: time.Hour},   // full in 2h30m: 0.5 token
	}}
	denied := p.Result(false, 1, [store.MaxLimits]time.Duration{time.Second, 150 * time.Minute})
	c.remember("k", now, denied, 1, p)
	res, ok := c.lookup("k", now.Add(time.Minute), 1, p)
	if !ok || res.Allowed || res.Remaining != 0 || res.RetryAfter != 29*time.Minute || res.Resets[0] != 0 || res.Resets[1] != 149*time.Minute {
		t.Fatalf("Take of 1 a minute later, limit h 0.5 token short: %+v %v, want denied, RetryAfter 29m", res, ok)
	}
	if _, ok := c.lookup("k", now.Add(30*time.Minute), 1, p); ok {
		t.Fatal("Take of 1 once limit h holds 1 token was denied locally")
	}
	// Limit s alone denies a Take of 3 (2 tokens) although limit h is full.
	c.forget("k")
	denied = p.Result(false, 3, [store.MaxLimits]time.Duration{3 * time.Second, 0})
	c.remember("k", now, denied, 3, p)
	if res, ok := c.lookup("k", now.Add(500*time.Millisecond), 3, p); !ok || res.RetryAfter != 500*time.Millisecond {
		t.Fatalf("Take of 3 with limit s at 2.5 tokens: %+v %v, want denied for 500ms", res, ok)
	}
	if _, ok := c.lookup("k", now.Add(500*time.Millisecond), 2, p); ok {
		t.Fatal("Take of 2, which both limits can pay, was denied locally")
	}
}
