// Package storetest is the conformance suite for store.Store
// implementations, in the style of testing/fstest: the built-in in-memory
// store, the redisstore module and any third-party store (memcached,
// Postgres, DynamoDB, …) run the same sequences of calls and must give the
// same decisions, Remaining, RetryAfter and ResetAfter. A store that is also
// an addrlimit.InFlightStore runs the in-flight cases too: exact limits,
// releases that free one lease once, leases that lapse unless renewed.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New:       func(t *testing.T) store.Store { return newEmptyStore(t) },
//			Tolerance: 50 * time.Millisecond, // real clock: time passes between calls
//		})
//	}
//
// The suite sleeps for a few seconds in total when the store reads a real
// clock; with Harness.Bubble the sleeps are instant.
package storetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// Harness describes the store under test.
type Harness struct {
	// New returns an empty store: no key may have a bucket. It is called
	// once per subtest, inside the synctest bubble when Bubble is set.
	New func(t *testing.T) store.Store
	// Bubble runs each subtest in a testing/synctest bubble, so that sleeps
	// are instant and exact. Use it for stores that read time.Now.
	Bubble bool
	// Tolerance is how far durations may fall short of the exact figures:
	// the time that passes between calls when the store's clock is real.
	// Cases that sleep for 100–200 ms assume the machine answers within it;
	// on a loaded CI machine a real clock makes them flaky. A store whose
	// clock lives elsewhere (a server's TIME) can inject a test clock and
	// set Bubble instead, as the redisstore module's tests do: its script
	// takes the time from the test when one is given.
	Tolerance time.Duration
	// Failure is the failure policy of the Limiter that the
	// "behind-a-Limiter" subtests call the store through (FailLocal, the
	// zero value, by default).
	Failure addrlimit.FailurePolicy
}

// Run runs the suite, one subtest per property: on the store, then, in
// subtests under "behind-a-Limiter", through a Limiter built
// WithStore(store) and WithStoreFailure(h.Failure), since that is how
// production calls a store (its FailLocal mirror follows every answer).
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	runCases(t, h, func(t *testing.T, s store.Store) store.Store { return s })
	t.Run("behind-a-Limiter", func(t *testing.T) {
		runCases(t, h, func(t *testing.T, s store.Store) store.Store {
			return &throughLimiter{T: t, s: s, failure: h.Failure, lims: map[string]*addrlimit.Limiter{}}
		})
	})
}

// runCases runs every case on wrap of a new store.
func runCases(t *testing.T, h Harness, wrap func(*testing.T, store.Store) store.Store) {
	for _, c := range slices.Concat(cases, inflightCases) {
		t.Run(c.name, func(t *testing.T) {
			run := func(t *testing.T) {
				store := h.New(t)
				c.run(&suite{T: t, h: h, s: wrap(t, store), store: store})
			}
			if h.Bubble {
				synctest.Test(t, run)
				return
			}
			run(t)
		})
	}
}

// suite is one subtest's state.
type suite struct {
	*testing.T
	h     Harness
	s     store.Store // the store under test, perhaps behind a Limiter
	store store.Store // the store Harness.New returned
}

func (s *suite) take(key string, p addrlimit.Policy, n int) store.Result {
	s.Helper()
	res, err := s.s.Take(context.Background(), key, p, n)
	if err != nil {
		s.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return res
}

func (s *suite) refund(key string, p addrlimit.Policy, n int) store.Result {
	s.Helper()
	res, err := s.s.Refund(context.Background(), key, p, n)
	if err != nil {
		s.Fatalf("Refund(%q, %d): %v", key, n, err)
	}
	return res
}

func (s *suite) peek(key string, p addrlimit.Policy) store.Result {
	s.Helper()
	res, err := s.s.Peek(context.Background(), key, p)
	if err != nil {
		s.Fatalf("Peek(%q): %v", key, err)
	}
	return res
}

func (s *suite) reset(key string, p addrlimit.Policy) {
	s.Helper()
	if err := s.s.Reset(context.Background(), key, p); err != nil {
		s.Fatalf("Reset(%q): %v", key, err)
	}
}

// near checks a duration that the store computed at some instant after the
// test's reference point: it may fall short by the tolerance, never exceed.
func (s *suite) near(what string, got, want time.Duration) {
	s.Helper()
	if got > want || got < want-s.h.Tolerance {
		s.Fatalf("%s = %v, want %v (tolerance -%v)", what, got, want, s.h.Tolerance)
	}
}

// want checks the allowed flag and Remaining of a result.
func (s *suite) want(what string, res store.Result, allowed bool, remaining int) {
	s.Helper()
	if res.Allowed != allowed || res.Remaining != remaining {
		s.Fatalf("%s: %+v, want Allowed=%v Remaining=%d", what, res, allowed, remaining)
	}
}

var (
	perSecond = addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Second}}}
	perHour   = addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}}
)

var cases = []struct {
	name string
	run  func(s *suite)
}{
	{"burst then deny", func(s *suite) {
		for i := range 5 {
			res := s.take("k", perSecond, 1)
			s.want(fmt.Sprintf("request %d", i+1), res, true, 4-i)
			if i < 4 && res.RetryAfter != 0 {
				s.Fatalf("request %d: RetryAfter %v while tokens remain", i+1, res.RetryAfter)
			}
			s.near(fmt.Sprintf("request %d ResetAfter", i+1), res.ResetAfter, time.Duration(i+1)*time.Second)
		}
		last := s.take("k", perSecond, 1)
		s.want("6th request", last, false, 0)
		s.near("denied RetryAfter", last.RetryAfter, time.Second)
		s.near("denied ResetAfter", last.ResetAfter, 5*time.Second)
	}},
	{"last token reports when the next arrives", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: 3 * time.Second}}}
		res := s.take("k", p, 1)
		s.want("only token", res, true, 0)
		s.near("RetryAfter", res.RetryAfter, 3*time.Second)
	}},
	{"keys are independent", func(s *suite) {
		for _, k := range []string{"192.0.2.1", "192.0.2.2", "2001:db8::/64", "{tag}:user 42", "ключ", "k\x00nul", "k:x", "h:x", string(make([]byte, 1000)), string(make([]byte, 1001))} {
			if res := s.take(k, perHour, 1); !res.Allowed {
				s.Fatalf("first request for %q denied", k)
			}
			if res := s.take(k, perHour, 1); res.Allowed {
				s.Fatalf("second request for %q allowed", k)
			}
		}
	}},
	{"policies are distinct", func(s *suite) {
		base := addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}}
		variants := []addrlimit.Policy{
			base,
			{Name: "login", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}},
			{Name: "api", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Hour}}},
			{Name: "api", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Minute}}},
		}
		for i, p := range variants {
			if res := s.take("shared-key", p, p.Limits[0].Burst); !res.Allowed {
				s.Fatalf("policy %d %+v: first request denied: it shares a bucket with an earlier policy", i, p)
			}
		}
		if res := s.take("shared-key", base, 1); res.Allowed {
			s.Fatal("an equal policy does not share its bucket")
		}
	}},
	{"take n", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Second}}}
		s.want("take 4", s.take("k", p, 4), true, 6)
		res := s.take("k", p, 7)
		s.want("take 7 of 6", res, false, 6)
		s.near("RetryAfter for 7 tokens", res.RetryAfter, time.Second)
		s.near("ResetAfter after a denied take", res.ResetAfter, 4*time.Second)
		res = s.take("k", p, 6)
		s.want("take the last 6", res, true, 0)
		s.near("RetryAfter of an empty bucket", res.RetryAfter, time.Second)
		s.want("take 1 of 0", s.take("k", p, 1), false, 0)
		s.want("take the whole burst of a new key", s.take("other", p, 10), true, 0)
	}},
	{"refund never fills above the burst", func(s *suite) {
		s.want("drain", s.take("k", perSecond, 5), true, 0)
		s.want("refund 2", s.refund("k", perSecond, 2), true, 2)
		s.want("peek after refund", s.peek("k", perSecond), true, 2)
		s.want("refund 5 more", s.refund("k", perSecond, 5), true, 5)
		s.want("take the burst", s.take("k", perSecond, 5), true, 0)
		s.want("one more", s.take("k", perSecond, 1), false, 0)
		s.want("refund of a missing key", s.refund("missing", perSecond, 3), true, 5)
		s.want("take after refunding a missing key", s.take("missing", perSecond, 5), true, 0)
		s.want("and not one more", s.take("missing", perSecond, 1), false, 0)
	}},
	{"peek changes nothing", func(s *suite) {
		res := s.peek("k", perSecond)
		s.want("peek of a new key", res, true, 5)
		if res.RetryAfter != 0 || res.ResetAfter != 0 {
			s.Fatalf("peek of a new key: %+v, want no waits", res)
		}
		for range 10 {
			s.peek("k", perSecond)
		}
		s.want("take after peeks", s.take("k", perSecond, 5), true, 0)
		res = s.peek("k", perSecond)
		s.want("peek of an empty bucket", res, false, 0)
		s.near("peek RetryAfter", res.RetryAfter, time.Second)
		s.near("peek ResetAfter", res.ResetAfter, 5*time.Second)
		s.want("take after peek", s.take("k", perSecond, 1), false, 0)
	}},
	{"reset", func(s *suite) {
		s.want("drain", s.take("k", perHour, 1), true, 0)
		s.reset("k", perHour)
		s.want("after reset", s.take("k", perHour, 1), true, 0)
		s.want("once", s.take("k", perHour, 1), false, 0)
		s.reset("never-seen", perHour)
		s.want("reset of a missing key", s.take("never-seen", perHour, 1), true, 0)
		other := addrlimit.Policy{Name: "other", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Hour}}}
		s.want("other policy", s.take("k", other, 1), true, 0)
		s.reset("k", perHour)
		s.want("reset leaves other policies alone", s.take("k", other, 1), false, 0)
	}},
	{"refill", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 2, Interval: 100 * time.Millisecond}}}
		s.take("k", p, 2)
		if s.take("k", p, 1).Allowed {
			s.Fatal("empty bucket allowed a request")
		}
		time.Sleep(100 * time.Millisecond)
		s.want("after one interval", s.take("k", p, 1), true, 0)
		if s.take("k", p, 1).Allowed {
			s.Fatal("one interval refilled more than one token")
		}
		time.Sleep(time.Second)
		s.want("after a full refill", s.take("k", p, 2), true, 0)
		if s.take("k", p, 1).Allowed {
			s.Fatal("a refilled bucket holds more than the burst")
		}
	}},
	{"denied requests consume nothing", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: 200 * time.Millisecond}}}
		s.take("k", p, 1)
		for range 50 {
			if s.take("k", p, 1).Allowed {
				s.Fatal("empty bucket allowed a request")
			}
		}
		time.Sleep(200 * time.Millisecond)
		if !s.take("k", p, 1).Allowed {
			s.Fatal("denied requests delayed the refill")
		}
	}},
	{"exact under concurrency", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 100, Interval: time.Hour}}}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 25 {
			wg.Go(func() {
				n := 1 + g%3 // costs 1, 2 and 3 race for one bucket
				for range 10 {
					res, err := s.s.Take(context.Background(), "shared", p, n)
					if err != nil {
						s.Error(err)
						return
					}
					if res.Allowed {
						allowed.Add(int64(n))
					}
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got > 100 || got < 98 {
			s.Fatalf("charged %d tokens from a bucket of 100 under concurrency, want 98..100 (at most 2 left over for a cost that did not fit)", got)
		}
		res := s.peek("shared", p)
		if int64(res.Remaining)+allowed.Load() != 100 {
			s.Fatalf("charged %d and %d remain: tokens were lost or created", allowed.Load(), res.Remaining)
		}
	}},
	{"concurrent refunds never overfill", func(s *suite) {
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
		s.take("k", p, 4)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := s.s.Refund(context.Background(), "k", p, 1); err != nil {
					s.Error(err)
				}
			})
		}
		wg.Wait()
		s.want("after 20 refunds of 1 into a bucket missing 4", s.peek("k", p), true, 10)
	}},
	{"a debt is charged whatever the bucket holds", func(s *suite) {
		ds, ok := s.s.(store.DebtStore)
		if !ok {
			s.Skip("the store is not an store.DebtStore")
		}
		take := func(key string, n, debt int) store.Result {
			s.Helper()
			res, err := ds.TakeWithDebt(context.Background(), key, perSecond, n, debt)
			if err != nil {
				s.Fatalf("TakeWithDebt(%q, %d, %d): %v", key, n, debt, err)
			}
			return res
		}
		s.want("debt 0 is Take", take("k", 1, 0), true, 4)
		s.want("debt 2, then take 1", take("k", 1, 2), true, 1)
		res := take("k", 1, 3)
		s.want("a debt beyond empty, then a denied take", res, false, 0)
		s.near("ResetAfter two tokens below empty", res.ResetAfter, 7*time.Second)
		s.near("RetryAfter two tokens below empty", res.RetryAfter, 3*time.Second)
		s.want("a denied take keeps the debt", s.peek("k", perSecond), false, 0)
		res = take("k", 1, 10)
		s.want("at most one burst below empty", res, false, 0)
		s.near("ResetAfter at the bound", res.ResetAfter, 10*time.Second)
		time.Sleep(6 * time.Second)
		s.want("repaid by time", s.take("k", perSecond, 1), true, 0)
		s.want("debt on a new key", take("new", 5, 5), false, 0)
		s.near("ResetAfter of a new key charged its burst", s.peek("new", perSecond).ResetAfter, 5*time.Second)
	}},
	{"several limits: all or nothing", func(s *suite) {
		p := s.several()
		s.want("take 2", s.take("k", p, 2), true, 1) // short: 1 left, long: 3
		res := s.take("k", p, 2)
		s.want("take 2 of short's 1", res, false, 1)
		s.near("RetryAfter: short's wait for 2", res.RetryAfter, 100*time.Millisecond)
		s.near("long untouched by the denial", res.Resets[1], 2*time.Hour)
		s.near("short's state", res.Resets[0], 200*time.Millisecond)
		s.want("take 1", s.take("k", p, 1), true, 0) // short: 0, long: 2
		time.Sleep(300 * time.Millisecond)           // short is full again
		s.want("take 2 of long's 2", s.take("k", p, 2), true, 0)
		res = s.take("k", p, 1)
		s.want("long is empty", res, false, 0)
		s.near("RetryAfter: long's wait", res.RetryAfter, time.Hour-300*time.Millisecond)
		s.near("ResetAfter: long's", res.ResetAfter, 5*time.Hour-300*time.Millisecond)
		s.near("short untouched by the denial", res.Resets[0], 200*time.Millisecond)
	}},
	{"several limits: refund, peek and reset cover every limit", func(s *suite) {
		p := s.several()
		s.take("k", p, 3)
		res := s.refund("k", p, 2)
		s.want("refund 2", res, true, 2)
		s.near("short after the refund", res.Resets[0], 100*time.Millisecond)
		s.near("long after the refund", res.Resets[1], time.Hour)
		res = s.peek("k", p)
		s.want("peek", res, true, 2)
		s.near("long at peek", res.Resets[1], time.Hour)
		s.reset("k", p)
		res = s.peek("k", p)
		s.want("after reset", res, true, 3)
		if res.Resets != [store.MaxLimits]time.Duration{} {
			s.Fatalf("Resets after reset %v, want every limit full", res.Resets)
		}
		s.want("each limit full", s.take("k", p, 3), true, 0)
	}},
	{"several limits: limits are part of a policy's identity", func(s *suite) {
		p := s.several()
		s.take("k", p, 3)
		q := addrlimit.Policy{Name: p.Name, Limits: p.Limits[:1]}
		s.want("the first limit alone is another policy", s.take("k", q, 3), true, 0)
		r := addrlimit.Policy{Name: p.Name, Limits: []addrlimit.Limit{p.Limits[1], p.Limits[0]}}
		s.want("the limits in another order are another policy", s.take("k", r, 3), true, 0)
	}},
	{"through a Limiter", func(s *suite) {
		lim, err := addrlimit.New(3, time.Minute, addrlimit.WithStore(s.s))
		if err != nil {
			s.Fatal(err)
		}
		var got []string
		for range 5 {
			d := lim.Allow(request())
			got = append(got, fmt.Sprintf("%v/%d", d.Outcome, d.Remaining))
			if d.Err != nil || d.Degraded {
				s.Fatalf("decision %+v", d)
			}
		}
		if want := "[allowed/2 allowed/1 allowed/0 limited/0 limited/0]"; fmt.Sprint(got) != want {
			s.Fatalf("decisions %v, want %s", got, want)
		}
	}},
}

// several returns a policy of two limits, short (3 per 300 ms) and long (5
// per 5 h), with the limits named as a Limiter names them, or skips the
// case if the store refuses several limits (PolicyChecker).
func (s *suite) several() addrlimit.Policy {
	s.Helper()
	p := addrlimit.Policy{Name: "several", Limits: []addrlimit.Limit{
		{Name: "short", Burst: 3, Interval: 100 * time.Millisecond},
		{Name: "long", Burst: 5, Interval: time.Hour},
	}}
	if pc, ok := s.store.(store.PolicyChecker); ok {
		if err := pc.CheckPolicy(p); err != nil {
			s.Skipf("the store refuses several limits: %v", err)
		}
	}
	return p
}

// request is a request from one fixed address.
func request() *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.77:1234"
	return r
}
