package redisstore_test

import (
	"io"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

// flapProxy is a TCP proxy on a loopback port in front of one Redis. Down,
// it cuts every connection and closes new ones at once, as a Redis that
// restarts or a network that drops would; up, it relays. Redis keeps its
// data throughout, so what changes is only whether the fleet can reach it.
type flapProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newFlapProxy(t testing.TB, target string) *flapProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flapProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		l.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *flapProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.relay(c) })
	}
}

func (p *flapProxy) relay(c net.Conn) {
	defer p.drop(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.drop(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// track registers c unless the proxy went down meanwhile.
func (p *flapProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *flapProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// setDown cuts every connection (down) or lets new ones through (up).
func (p *flapProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// flap toggles the proxy every half period until stop is closed, and leaves
// it up.
func (p *flapProxy) flap(half time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(half)
	defer t.Stop()
	down := false
	for {
		select {
		case <-stop:
			p.setDown(false)
			return
		case <-t.C:
			down = !down
			p.setDown(down)
		}
	}
}

// flapRun is what a flapping run measured, per key.
type flapRun struct {
	flapAllowed, allAllowed, local int64   // allowed while flapping, in all, locally
	flap, settle                   float64 // seconds
	flooded, floodedLocal          int64   // other addresses' requests while flapping, in all and decided locally
}

const flapBurst, flapRate = 400, 200.0 // tokens, tokens per second

// raw is what the flapping period allowed against its budget.
func (r flapRun) raw() float64 {
	return float64(r.flapAllowed) / (flapBurst + flapRate*r.flap)
}

// net is what the flapping period let through once the debt it left was
// repaid: everything allowed, less what the settling period's refill
// allows, against the flapping period's budget.
func (r flapRun) net() float64 {
	return (float64(r.allAllowed) - flapRate*r.settle) / (flapBurst + flapRate*r.flap)
}

// runFlapping sends requests from two instances (each with its own client,
// through one flapping proxy to one Redis) for flap, Redis unreachable
// every other 100 ms, then for settle with Redis reachable, under a policy
// of 200/s in bursts of 400, from one client, and counts what was allowed.
// With flood, each instance also serves requests from other addresses while
// flapping, each address new (sendFlood).
func runFlapping(t *testing.T, flap, settle time.Duration, flood bool) flapRun {
	srv := startServer(t)
	px := newFlapProxy(t, srv.addr())
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	var fleet []*addrlimit.Limiter
	for range 2 {
		// Down, the proxy refuses at once: a long timeout changes nothing
		// there, but keeps a loaded machine's slow round trips from
		// counting as outages (they did beside two busy loops: more
		// fallback decisions, and debts older than a refill forgotten).
		s, err := redisstore.New(px.client(t), prefix, redisstore.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := addrlimit.New(flapBurst, 2*time.Second, addrlimit.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, lim)
	}
	var allowed, local, flooded, floodedLocal atomic.Int64
	stopFlap, stop := make(chan struct{}), make(chan struct{})
	var wg, flapper sync.WaitGroup
	start := time.Now()
	flapper.Go(func() { px.flap(100*time.Millisecond, stopFlap) })
	for g := range 2 {
		if !flood {
			break
		}
		flapper.Go(func() { sendFlood(fleet[g], 2, g, stopFlap, &flooded, &floodedLocal) })
	}
	for g := range 8 {
		wg.Go(func() {
			lim := fleet[g%2]
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "198.51.100.1:1"
			for {
				select {
				case <-stop:
					return
				default:
				}
				if d := lim.Allow(r); d.Outcome == addrlimit.Allowed {
					allowed.Add(1)
					if d.Degraded {
						local.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // a client's pace, not a spinning loop
			}
		})
	}
	time.Sleep(flap) // the durations are what is measured
	close(stopFlap)
	flapper.Wait()
	run := flapRun{flapAllowed: allowed.Load(), flap: time.Since(start).Seconds(), flooded: flooded.Load(), floodedLocal: floodedLocal.Load()}
	mid := time.Now()
	time.Sleep(settle)
	close(stop)
	wg.Wait()
	run.allAllowed, run.local, run.settle = allowed.Load(), local.Load(), time.Since(mid).Seconds()
	return run
}

// client returns a go-redis client through the proxy, closed when the test
// ends. It does not retry: a call that meets the proxy down fails at once,
// as against an unreachable Redis, instead of waiting for it to come up.
func (p *flapProxy) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.l.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// Redis reachable and not every other 100 ms, two instances, a 1 s store
// timeout: what each instance's local fallback spends reaches Redis as a
// debt when it answers again, so that once Redis has seen it, the client got
// no more than about its budget (without debts: 2.2–2.4×; pushing each
// instance's local state to Redis and keeping the later of both instead of
// a debt, measured once: 1.7×, since each instance's state holds only its
// own spending). The flapping
// period alone shows the debt still owed at its end. The bound leaves room
// for a loaded machine, where more decisions fall to the fallback.
func TestFlappingRedisKeepsTheBudget(t *testing.T) {
	r := runFlapping(t, 4*time.Second, 2500*time.Millisecond, false)
	t.Logf("flapping %.1f s: allowed %d (%d by the fallback), %.2f× the budget; with %.1f s of settling: %.2f× once the debt is repaid",
		r.flap, r.flapAllowed, r.local, r.raw(), r.settle, r.net())
	if r.local == 0 {
		t.Fatal("no decision fell to the local fallback: Redis never looked down")
	}
	if got := r.net(); got > 1.2 {
		t.Fatalf("the client got %.2f× its budget across two instances, want at most 1.2×", got)
	}
}

// The same with a flood: each instance also serves as many requests from
// other addresses as it can, each new, so that the debts of the addresses
// its fallback lets through fill its debt record (16,384 keys) within a
// refill time (2 s), after which they expire. The client's debts keep their
// place (before: the full records refused them).
func TestFlappingRedisKeepsTheBudgetThroughAFlood(t *testing.T) {
	r := runFlapping(t, 4*time.Second, 2500*time.Millisecond, true)
	t.Logf("flapping %.1f s with %d other requests (%.0f/s per instance, %d decided by the fallbacks): the client was allowed %d (%d by the fallback), %.2f× the budget; with %.1f s of settling: %.2f× once the debt is repaid",
		r.flap, r.flooded, float64(r.flooded)/r.flap/2, r.floodedLocal, r.flapAllowed, r.local, r.raw(), r.settle, r.net())
	if r.local == 0 {
		t.Fatal("no decision fell to the local fallback: Redis never looked down")
	}
	if got := r.net(); got > 1.2 {
		t.Fatalf("the client got %.2f× its budget across two instances, want at most 1.2×", got)
	}
}
