package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// A flood of limited keys cannot grow the deny cache past its size, and
// entries whose denial is over are dropped.
func TestDenyCacheIsBounded(t *testing.T) {
	c := newDenyCache(100)
	now := time.Unix(1_700_000_000, 0)
	denied := addrlimit.Result{RetryAfter: time.Second, ResetAfter: time.Minute}
	for i := range 10_000 {
		c.remember(fmt.Sprint("k", i), now, denied, 1, time.Second)
	}
	if n := c.len(); n != 100 {
		t.Fatalf("cache holds %d keys after a flood, want its size 100", n)
	}
	if res, ok := c.lookup("k5", now.Add(400*time.Millisecond), 1); !ok || res.Allowed || res.RetryAfter != 600*time.Millisecond {
		t.Fatalf("lookup of a cached key: %+v %v", res, ok)
	}
	if _, ok := c.lookup("k9999", now, 1); ok {
		t.Fatal("a key remembered past the size was cached")
	}
	// Once the denials are over, a full cache makes room (sweeping at most
	// once per sweepEvery).
	later := now.Add(2 * time.Second)
	c.remember("new", later, denied, 1, time.Second)
	if _, ok := c.lookup("new", later, 1); !ok || c.len() != 1 {
		t.Fatalf("expired entries not swept: len %d", c.len())
	}
	// Expired entries are never served.
	if _, ok := c.lookup("k5", later, 1); ok {
		t.Fatal("expired denial served")
	}
	// A denial without a wait is not cached; a nil cache is a no-op.
	c.remember("zero", later, addrlimit.Result{}, 1, time.Second)
	if _, ok := c.lookup("zero", later, 1); ok {
		t.Fatal("zero RetryAfter cached")
	}
	var off *denyCache
	off.remember("k", now, denied, 1, time.Second)
	if _, ok := off.lookup("k", now, 1); ok || off.len() != 0 {
		t.Fatal("disabled cache remembered")
	}
}

// A denied Take of n tokens caches the time until one token exists; a Take
// of m tokens then waits m-1 intervals more. Denials of a bucket that still
// has tokens (n too large) are not cached; forget drops an entry.
func TestDenyCacheCountsTokens(t *testing.T) {
	c := newDenyCache(10)
	now := time.Unix(1_700_000_000, 0)
	// Take of 3 denied, 0 left, one token in 400ms: RetryAfter(3) = 400ms + 2s.
	c.remember("k", now, addrlimit.Result{RetryAfter: 2400 * time.Millisecond, ResetAfter: 5 * time.Second}, 3, time.Second)
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 400 * time.Millisecond}, {2, 1400 * time.Millisecond}, {5, 4400 * time.Millisecond}} {
		res, ok := c.lookup("k", now, tc.n)
		if !ok || res.Allowed || res.Remaining != 0 || res.RetryAfter != tc.want || res.ResetAfter != 5*time.Second {
			t.Fatalf("Take of %d: %+v %v, want RetryAfter %v", tc.n, res, ok, tc.want)
		}
	}
	if _, ok := c.lookup("k", now.Add(400*time.Millisecond), 1); ok {
		t.Fatal("denied once one token exists")
	}
	c.remember("some", now, addrlimit.Result{Remaining: 2, RetryAfter: time.Second}, 3, time.Second)
	if _, ok := c.lookup("some", now, 1); ok {
		t.Fatal("a bucket with tokens left was cached as empty")
	}
	c.remember("k", now, addrlimit.Result{RetryAfter: time.Second}, 1, time.Second)
	c.forget("k")
	if _, ok := c.lookup("k", now, 1); ok {
		t.Fatal("forgotten key still denied")
	}
}
