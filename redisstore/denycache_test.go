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
		c.remember(fmt.Sprint("k", i), now, denied)
	}
	if n := c.len(); n != 100 {
		t.Fatalf("cache holds %d keys after a flood, want its size 100", n)
	}
	if res, ok := c.lookup("k5", now.Add(400*time.Millisecond)); !ok || res.Allowed || res.RetryAfter != 600*time.Millisecond {
		t.Fatalf("lookup of a cached key: %+v %v", res, ok)
	}
	if _, ok := c.lookup("k9999", now); ok {
		t.Fatal("a key remembered past the size was cached")
	}
	// Once the denials are over, a full cache makes room (sweeping at most
	// once per sweepEvery).
	later := now.Add(2 * time.Second)
	c.remember("new", later, denied)
	if _, ok := c.lookup("new", later); !ok || c.len() != 1 {
		t.Fatalf("expired entries not swept: len %d", c.len())
	}
	// Expired entries are never served.
	if _, ok := c.lookup("k5", later); ok {
		t.Fatal("expired denial served")
	}
	// A denial without a wait is not cached; a nil cache is a no-op.
	c.remember("zero", later, addrlimit.Result{})
	if _, ok := c.lookup("zero", later); ok {
		t.Fatal("zero RetryAfter cached")
	}
	var off *denyCache
	off.remember("k", now, denied)
	if _, ok := off.lookup("k", now); ok || off.len() != 0 {
		t.Fatal("disabled cache remembered")
	}
}
