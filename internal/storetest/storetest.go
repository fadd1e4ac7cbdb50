// Package storetest is the conformance suite that every addrlimit.Store must
// pass, so that the in-memory and Redis stores cannot drift apart: the same
// sequence of requests must get the same decisions, Remaining and RetryAfter.
package storetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
)

// Harness describes the store under test.
type Harness struct {
	// New returns an empty store. It is called once per subtest, inside the
	// synctest bubble when Bubble is set.
	New func(t *testing.T) addrlimit.Store
	// Bubble runs each subtest in a testing/synctest bubble, so that sleeps are
	// instant and exact. Use it for stores that read time.Now.
	Bubble bool
	// Tolerance is how far durations may differ from the exact figures: the
	// time that passes between calls when the store's clock is real.
	Tolerance time.Duration
}

func (h Harness) run(t *testing.T, name string, f func(t *testing.T, s addrlimit.Store)) {
	t.Run(name, func(t *testing.T) {
		if h.Bubble {
			synctest.Test(t, func(t *testing.T) { f(t, h.New(t)) })
			return
		}
		f(t, h.New(t))
	})
}

func (h Harness) near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got > want || got < want-h.Tolerance {
		t.Fatalf("%s = %v, want %v (tolerance -%v)", what, got, want, h.Tolerance)
	}
}

func take(t *testing.T, s addrlimit.Store, key string, p addrlimit.Policy) addrlimit.Result {
	t.Helper()
	res, err := s.Take(context.Background(), key, p)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return res
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	second := addrlimit.Policy{Burst: 5, Interval: time.Second}

	h.run(t, "burst then deny", func(t *testing.T, s addrlimit.Store) {
		for i := range 5 {
			res := take(t, s, "k", second)
			if !res.Allowed || res.Remaining != 4-i {
				t.Fatalf("request %d: %+v, want allowed with %d remaining", i+1, res, 4-i)
			}
			if i < 4 && res.RetryAfter != 0 {
				t.Fatalf("request %d: RetryAfter %v while tokens remain", i+1, res.RetryAfter)
			}
			h.near(t, fmt.Sprintf("request %d ResetAfter", i+1), res.ResetAfter, time.Duration(i+1)*time.Second)
		}
		last := take(t, s, "k", second)
		if last.Allowed || last.Remaining != 0 {
			t.Fatalf("6th request: %+v, want denied", last)
		}
		h.near(t, "denied RetryAfter", last.RetryAfter, time.Second)
		h.near(t, "denied ResetAfter", last.ResetAfter, 5*time.Second)
	})

	h.run(t, "last token reports when the next arrives", func(t *testing.T, s addrlimit.Store) {
		p := addrlimit.Policy{Burst: 1, Interval: 3 * time.Second}
		res := take(t, s, "k", p)
		if !res.Allowed || res.Remaining != 0 {
			t.Fatalf("%+v", res)
		}
		h.near(t, "RetryAfter", res.RetryAfter, 3*time.Second)
	})

	h.run(t, "keys are independent", func(t *testing.T, s addrlimit.Store) {
		p := addrlimit.Policy{Burst: 1, Interval: time.Hour}
		for _, k := range []string{"192.0.2.1", "192.0.2.2", "2001:db8::/64", "{tag}:user 42", "ключ", "k\x00nul", string(make([]byte, 1000))} {
			if res := take(t, s, k, p); !res.Allowed {
				t.Fatalf("first request for %q denied", k)
			}
			if res := take(t, s, k, p); res.Allowed {
				t.Fatalf("second request for %q allowed", k)
			}
		}
	})

	h.run(t, "refill", func(t *testing.T, s addrlimit.Store) {
		p := addrlimit.Policy{Burst: 2, Interval: 100 * time.Millisecond}
		take(t, s, "k", p)
		take(t, s, "k", p)
		if take(t, s, "k", p).Allowed {
			t.Fatal("empty bucket allowed a request")
		}
		time.Sleep(100 * time.Millisecond)
		if res := take(t, s, "k", p); !res.Allowed || res.Remaining != 0 {
			t.Fatalf("after one interval: %+v, want one token", res)
		}
		if take(t, s, "k", p).Allowed {
			t.Fatal("one interval refilled more than one token")
		}
		time.Sleep(time.Second)
		for i := range 2 {
			if !take(t, s, "k", p).Allowed {
				t.Fatalf("after a full refill, request %d denied", i+1)
			}
		}
		if take(t, s, "k", p).Allowed {
			t.Fatal("a refilled bucket holds more than the burst")
		}
	})

	h.run(t, "denied requests consume nothing", func(t *testing.T, s addrlimit.Store) {
		p := addrlimit.Policy{Burst: 1, Interval: 200 * time.Millisecond}
		take(t, s, "k", p)
		for range 50 {
			if take(t, s, "k", p).Allowed {
				t.Fatal("empty bucket allowed a request")
			}
		}
		time.Sleep(200 * time.Millisecond)
		if !take(t, s, "k", p).Allowed {
			t.Fatal("denied requests delayed the refill")
		}
	})

	h.run(t, "exact under concurrency", func(t *testing.T, s addrlimit.Store) {
		p := addrlimit.Policy{Burst: 100, Interval: time.Hour}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 25 {
			wg.Go(func() {
				for range 10 {
					res, err := s.Take(context.Background(), "shared", p)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Fatalf("allowed %d of 250 concurrent requests, want exactly the burst of 100", got)
		}
	})

	h.run(t, "through a Limiter", func(t *testing.T, s addrlimit.Store) {
		lim, err := addrlimit.New(3, time.Minute, addrlimit.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 5 {
			d := lim.Allow(&httpRequest)
			got = append(got, fmt.Sprintf("%v/%d", d.Outcome, d.Remaining))
			if d.Err != nil || d.Degraded {
				t.Fatalf("decision %+v", d)
			}
		}
		if want := "[allowed/2 allowed/1 allowed/0 limited/0 limited/0]"; fmt.Sprint(got) != want {
			t.Fatalf("decisions %v, want %s", got, want)
		}
	})
}

// httpRequest is a request from one fixed address.
var httpRequest = func() http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.77:1234"
	return *r
}()
