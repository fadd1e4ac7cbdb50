package addrlimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// TestWithClock: the buckets read the given clock and nothing else (the
// test never sleeps and its real duration does not matter), and a clock
// that goes back refills nothing.
func TestWithClock(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	lim := mustNew(t, 2, time.Minute, addrlimit.WithClock(clk.Now)) // a token every 30 s
	r := req("192.0.2.1:1234")
	step := func(at time.Time, want addrlimit.Outcome, wantRetry time.Duration) {
		t.Helper()
		clk.Set(at)
		d := lim.Allow(r)
		if d.Outcome != want || (want == addrlimit.Limited && d.RetryAfter != wantRetry) {
			t.Fatalf("at t0%+v: %v, RetryAfter %v; want %v, %v", at.Sub(t0), d.Outcome, d.RetryAfter, want, wantRetry)
		}
	}
	step(t0.Add(-time.Hour), addrlimit.Allowed, 0) // before the first reading: counts as t0, a full bucket
	step(t0, addrlimit.Allowed, 0)
	step(t0, addrlimit.Limited, 30*time.Second)
	step(t0.Add(29*time.Second), addrlimit.Limited, time.Second)
	step(t0.Add(30*time.Second), addrlimit.Allowed, 0)
	step(t0.Add(30*time.Second), addrlimit.Limited, 30*time.Second)
	// Back by an hour: read as t0+30s, the latest reading; nothing refills.
	step(t0.Add(-time.Hour), addrlimit.Limited, 30*time.Second)
	step(t0.Add(59*time.Second), addrlimit.Limited, time.Second)
	step(t0.Add(60*time.Second), addrlimit.Allowed, 0)
	// An hour later the bucket is full again: exactly its burst.
	step(t0.Add(time.Hour), addrlimit.Allowed, 0)
	step(t0.Add(time.Hour), addrlimit.Allowed, 0)
	step(t0.Add(time.Hour), addrlimit.Limited, 30*time.Second)

	d, err := lim.Peek(context.Background(), "", addrlimit.AddrKey(netipAddr("192.0.2.1")))
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 0 || d.RetryAfter != 30*time.Second {
		t.Fatalf("Peek at t0+1h: %+v, want 0 remaining, a token in 30s", d)
	}
}

func TestWithClockNil(t *testing.T) {
	_, err := addrlimit.New(1, time.Second, addrlimit.WithClock(nil))
	requirePackageError(t, err, "WithClock given a nil function")
}
