package redisstore_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
)

// floodAddr is the peer address of the i-th address of a flood, one of 2^24.
func floodAddr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d:1", i>>16&0xff, i>>8&0xff, i&0xff)
}

// sendFlood sends requests through lim from new addresses, the n-th from
// floodAddr(of*n + nth), until stop is closed, with a millisecond's pause
// after every 64 (at most 64,000/s), and counts them in sent and those the
// local fallback decided in local.
func sendFlood(lim *addrlimit.Limiter, of, nth int, stop <-chan struct{}, sent, local *atomic.Int64) {
	r := httptest.NewRequest("GET", "/", nil)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		r.RemoteAddr = floodAddr(of*n + nth)
		if d := lim.Allow(r); d.Degraded {
			local.Add(1)
		}
		sent.Add(1)
		if n%64 == 63 {
			time.Sleep(time.Millisecond)
		}
	}
}

// floodDebts is how many other addresses a flood sends through each
// instance: more than a policy's debt record holds (16,384 keys).
const floodDebts = 16_400

// debtFleet is instances that reach one Redis through a proxy that the test
// takes down, and a store that reaches it directly, to read what Redis
// holds.
type debtFleet struct {
	px     *flapProxy
	lims   []*addrlimit.Limiter
	stores []*redisstore.Store
	direct *redisstore.Store
}

// newDebtFleet starts a Redis and n instances under a policy of 300/min.
// The store timeout is long (a loaded machine's slow round trip is not an
// outage here: the proxy refuses at once when it is down) and the circuits
// are probed every 20 ms.
func newDebtFleet(t *testing.T, n int) *debtFleet {
	srv := startServer(t)
	f := &debtFleet{px: newFlapProxy(t, srv.addr())}
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	for range n {
		s, err := redisstore.New(f.px.client(t), prefix, redisstore.WithTimeout(time.Second), redisstore.WithBreaker(3, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := addrlimit.New(300, time.Minute, addrlimit.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		f.lims, f.stores = append(f.lims, lim), append(f.stores, s)
	}
	f.direct = newStore(t, srv.client(t), prefix)
	return f
}

// owed returns the tokens Redis holds of key's bucket beyond empty, and the
// tokens Redis charged it since it was last full (ResetAfter in tokens).
func (f *debtFleet) owed(t *testing.T, key string) (beyond, charged float64) {
	p := f.lims[0].Policies()[0]
	res, err := f.direct.Peek(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	charged = float64(res.ResetAfter) / float64(p.Limits[0].Interval)
	return max(0, charged-float64(p.Limits[0].Burst)), charged
}

// Two instances, 300/min, Redis unreachable: each instance's fallback lets
// 16,400 other addresses through (two requests each, more than the debt
// record holds), then a client spends its burst through both. Once Redis
// answers, both debts reach it: the client got its budget, less what Redis
// still holds as debt, once (before: the full records refused the client's
// debts, and it got 2.0× its budget).
func TestAFloodDuringAnOutageKeepsTheDebts(t *testing.T) {
	f := newDebtFleet(t, 2)
	const victim = "198.51.100.1"
	f.px.setDown(true)
	for j, lim := range f.lims {
		for i := range floodDebts {
			lim.Allow(req(floodAddr(j*floodDebts + i)))
			lim.Allow(req(floodAddr(j*floodDebts + i)))
		}
	}
	start := time.Now()
	allowed := 0
	for i := range 800 {
		if d := f.lims[i%2].Allow(req(victim + ":1")); d.Outcome == addrlimit.Allowed {
			allowed++
		}
	}
	f.px.setDown(false)
	waitClosed(t, f.stores...)
	for i := range 20 {
		d := f.lims[i%2].Allow(req(victim + ":1"))
		if d.Degraded {
			t.Fatalf("decision %d after Redis returned: degraded (%v); the counts would mean nothing", i+1, d.Err)
		}
		if d.Outcome == addrlimit.Allowed {
			allowed++
		}
	}
	budget := 300 + 5*time.Since(start).Seconds()
	owed, _ := f.owed(t, victim)
	got := (float64(allowed) - owed) / budget
	t.Logf("allowed %d, Redis still holds %.0f as debt: %.2f× the budget of %.0f", allowed, owed, got, budget)
	if got > 1.2 {
		t.Fatalf("the client got %.2f× its budget across two instances, want at most 1.2×", got)
	}
}

// A client's debt of 300 tokens is recorded, then a flood of 32,800 other
// addresses lands while its payments fail (Redis still unreachable, as
// when a circuit has not closed yet after Redis returned): the debt keeps
// its place, and Redis is charged all of it once it answers (before: a
// failed payment took the debt out and put it back, the flood took the
// room meanwhile, and Redis was charged nothing of it).
func TestAFailedPaymentKeepsItsDebtThroughAFlood(t *testing.T) {
	f := newDebtFleet(t, 1)
	lim := f.lims[0]
	const victim = "198.51.100.1"
	f.px.setDown(true)
	local := 0
	for range 300 {
		if d := lim.Allow(req(victim + ":1")); d.Outcome == addrlimit.Allowed {
			local++
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if d := lim.Allow(req(victim + ":1")); d.Outcome == addrlimit.Allowed {
				local++ // a token refilled meanwhile
			}
		}
	})
	for i := range 2 * floodDebts {
		lim.Allow(req(floodAddr(i)))
	}
	close(stop)
	wg.Wait()
	f.px.setDown(false)
	waitClosed(t, f.stores...)
	if d := lim.Allow(req(victim + ":1")); d.Degraded {
		t.Fatalf("the decision after Redis returned was degraded (%v); the count would mean nothing", d.Err)
	}
	_, charged := f.owed(t, victim) // its bucket was full: all it holds is what was paid
	t.Logf("the fallback allowed %d; Redis was charged %.1f", local, charged)
	if charged < 0.9*float64(local) {
		t.Fatalf("Redis was charged %.1f of the %d tokens the fallback allowed, want at least 90%%", charged, local)
	}
}
