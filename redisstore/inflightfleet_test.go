package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
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

// The in-flight limit end to end: real Limiters (each with its own go-redis
// client) behind real HTTP servers on loopback, sharing one Redis or one
// Cluster, with handlers that block until the test lets them return. Exact
// counts are asserted only once no decision was degraded (Decision.Degraded
// via the observer, Stats().StoreErrors): they then depend on the store's
// script alone, not on scheduling.

// gauge counts the handlers of one scope that run at once: now, the most
// seen, and how many ever entered.
type gauge struct{ now, most, entered atomic.Int64 }

func (g *gauge) up() {
	g.entered.Add(1)
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
}

func (g *gauge) down() { g.now.Add(-1) }

// gate holds handlers until let is called (once or more).
type gate struct {
	c    chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{c: make(chan struct{})} }

func (g *gate) let() { g.once.Do(func() { close(g.c) }) }

// blockHandler counts each request in the gauges scope returns for it, and
// returns once open is closed.
func blockHandler(open <-chan struct{}, scope func(r *http.Request) []*gauge) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gs := scope(r)
		for _, g := range gs {
			g.up()
		}
		<-open
		for _, g := range gs {
			g.down()
		}
	})
}

// fleetServer is an instance behind a real HTTP server on loopback.
type fleetServer struct {
	*instance
	srv *httptest.Server
}

// serve starts an HTTP server on loopback serving h through in's Limiter;
// it closes when the test ends, after g lets every handler go (so that
// none still blocks then).
func serve(t *testing.T, in *instance, h http.Handler, g *gate) *fleetServer {
	t.Helper()
	srv := httptest.NewServer(in.lim.Handler(h))
	t.Cleanup(srv.Close)
	t.Cleanup(g.let) // runs before srv.Close
	return &fleetServer{instance: in, srv: srv}
}

// serveFleet serves h through each instance (see serve).
func serveFleet(t *testing.T, h http.Handler, g *gate, fleet ...*instance) []*fleetServer {
	t.Helper()
	var out []*fleetServer
	for _, in := range fleet {
		out = append(out, serve(t, in, h, g))
	}
	return out
}

// response is what a client saw of one request.
type response struct {
	code       int
	retryAfter string
	err        error
}

// sendAll sends one request to each of urls at once, each with the
// X-Forwarded-For field xff[i] when xff is not nil, and returns the
// channel their responses arrive on.
func sendAll(t *testing.T, urls, xff []string) <-chan response {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: len(urls)}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	out := make(chan response, len(urls))
	for i, u := range urls {
		go func() {
			r, err := http.NewRequest("GET", u, nil)
			if err != nil {
				out <- response{err: err}
				return
			}
			if xff != nil {
				r.Header.Set("X-Forwarded-For", xff[i])
			}
			res, err := c.Do(r)
			if err != nil {
				out <- response{err: err}
				return
			}
			res.Body.Close()
			out <- response{code: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
		}()
	}
	return out
}

// settle reads the responses of total requests until every one either got
// its response or entered a handler (entered reports how many did), and
// returns the responses: each came before any handler was let go, so each
// is a refusal. The bound (60 s) is generous: on a loaded machine, a
// request that never settles is a bug, not a slow run.
func settle(t *testing.T, got <-chan response, total int, entered func() int64) []response {
	t.Helper()
	var early []response
	deadline := time.After(60 * time.Second)
	for int(entered())+len(early) < total {
		select {
		case r := <-got:
			early = append(early, r)
		case <-time.After(5 * time.Millisecond): // polling the handlers' count
		case <-deadline:
			t.Fatalf("after 60 s, %d handlers entered and %d responses of %d requests", entered(), len(early), total)
		}
	}
	return early
}

// refusals checks that every response in rs is a want with Retry-After: 1.
func refusals(t *testing.T, rs []response, want int) {
	t.Helper()
	for _, r := range rs {
		if r.err != nil || r.code != want || r.retryAfter != "1" {
			t.Fatalf("a refused request got %d, Retry-After %q, error %v; want %d with Retry-After: 1", r.code, r.retryAfter, r.err, want)
		}
	}
}

// finish reads n more responses (of the requests let go) and checks that
// each is a 200.
func finish(t *testing.T, got <-chan response, n int) {
	t.Helper()
	for range n {
		if r := <-got; r.err != nil || r.code != 200 {
			t.Fatalf("a request that ran got %d, error %v; want 200", r.code, r.err)
		}
	}
}

// mark is how many degraded decisions and store errors an instance had.
type mark struct {
	degraded    int
	storeErrors uint64
}

func marks(fleet []*instance) []mark {
	var ms []mark
	for _, in := range fleet {
		ms = append(ms, mark{len(in.degraded()), in.lim.Stats().StoreErrors})
	}
	return ms
}

// notDegraded fails t unless every decision of the fleet since the marks
// (nil: ever) came from Redis.
func notDegraded(t *testing.T, since []mark, fleet ...*instance) {
	t.Helper()
	for i, m := range marks(fleet) {
		if since != nil {
			m.degraded -= since[i].degraded
			m.storeErrors -= since[i].storeErrors
		}
		if m.degraded != 0 || m.storeErrors != 0 {
			t.Fatalf("instance %d: %d degraded decisions (%v), %d store errors: exact counts need none", i, m.degraded, fleet[i].degraded(), m.storeErrors)
		}
	}
}

// splitURLs returns n URLs alternating over the servers.
func splitURLs(fleet []*fleetServer, n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = fleet[i%len(fleet)].srv.URL
	}
	return urls
}

// loopbackLease is the lease (without ID) of the loopback client's slots
// under the default policy.
var loopbackLease = store.Lease{Policy: addrlimit.DefaultPolicyName, Key: addrlimit.AddrKey(netip.MustParseAddr("127.0.0.1"))}

// overN sends n+k requests of one client at once, split over the fleet's
// servers, and checks that exactly n handlers run (at most n at once,
// counted by one gauge over both servers), the k others get 429 with
// Retry-After: 1, and, once the handlers return, no slot is left in Redis.
func overN(t *testing.T, obs redis.UniversalClient, fleet []*fleetServer, g *gauge, open *gate, n, k int) {
	t.Helper()
	var ins []*instance
	for _, f := range fleet {
		ins = append(ins, f.instance)
	}
	since := marks(ins)
	got := sendAll(t, splitURLs(fleet, n+k), nil)
	early := settle(t, got, n+k, g.entered.Load)
	notDegraded(t, since, ins...)
	if e, m := g.entered.Load(), g.most.Load(); e != int64(n) || m != int64(n) || len(early) != k {
		t.Fatalf("%d requests of one client over %d instances, WithInFlight(%d): %d handlers ran (at most %d at once), %d refused; want exactly %d and %d",
			n+k, len(fleet), n, e, m, len(early), n, k)
	}
	refusals(t, early, 429)
	var held, keys int
	for _, in := range ins {
		st := in.lim.Stats().Policies[0]
		held, keys = held+st.InFlight, keys+st.InFlightKeys
	}
	if held != n || keys < 1 {
		t.Fatalf("Stats: %d slots held by %d keys over the fleet's instances while %d handlers run, want %d slots", held, keys, n, n)
	}
	if z := zcard(t, obs, fleet[0].store, loopbackLease); z != int64(n) {
		t.Fatalf("ZCARD %d while %d handlers run, want %d", z, n, n)
	}
	open.let()
	finish(t, got, n)
	notDegraded(t, since, ins...)
	if z := zcard(t, obs, fleet[0].store, loopbackLease); z != 0 {
		t.Fatalf("ZCARD %d after every handler returned, want 0 (a leaked slot)", z)
	}
}

// Two instances (two clients, one Redis), WithInFlight(3) beside a rate
// limit: 40 requests of one client at once, 20 per server, run exactly 3
// handlers fleet-wide (counted in Stats while they run); 37 get 429 with
// Retry-After: 1 and are charged nothing; no slot is left.
func TestInFlightFleetTwoInstancesShareN(t *testing.T) {
	needRedis(t)
	const n, k = 3, 37
	prefix := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t))}
	a := newInstance(t, shared.client(t), 1000, time.Hour, prefix, addrlimit.WithInFlight(n))
	b := newInstance(t, shared.client(t), 1000, time.Hour, prefix, addrlimit.WithInFlight(n))
	var g gauge
	open := newGate()
	h := blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&g} })
	fleet := serveFleet(t, h, open, a, b)
	overN(t, shared.client(t), fleet, &g, open, n, k)
	// A refused request is charged nothing: the rate bucket (1000 per hour,
	// a token every 3.6 s) paid for the 3 that ran only.
	d, err := a.lim.Peek(context.Background(), "", loopbackLease.Key)
	if err != nil || d.Remaining < 1000-n || d.Remaining > 1000-n+1 {
		t.Fatalf("Peek after the requests: %d remaining, %v; want %d (one more if a token refilled)", d.Remaining, err, 1000-n)
	}
	if got := a.lim.Stats().Policies[0].InFlightLimited + b.lim.Stats().Policies[0].InFlightLimited; got != k {
		t.Fatalf("InFlightLimited %d over both instances, want %d", got, k)
	}
	t.Logf("%d requests over 2 instances: %d ran (at most %d at once), %d refused with 429", n+k, g.entered.Load(), g.most.Load(), k)
}

// fleetOnCluster: the same on a three-master Cluster, for 12 clients
// (behind a trusted proxy, keyed by X-Forwarded-For) whose slot sets lie on
// every master: each client runs exactly its 2 handlers of 5 at once.
func fleetOnCluster(t *testing.T, nodes []*redisServer) {
	const n, k, clients = 2, 3, 12
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t))}
	opts := []addrlimit.Option{addrlimit.WithInFlight(n), addrlimit.WithKeyFunc(proxies.Key)}
	a := newInstance(t, clusterClient(t, nodes), 1000, time.Hour, prefix, opts...)
	b := newInstance(t, clusterClient(t, nodes), 1000, time.Hour, prefix, opts...)
	obs := clusterClient(t, nodes)
	gauges := map[string]*gauge{}
	masters := map[string]bool{}
	for i := range clients {
		addr := fmt.Sprint("198.51.100.", i+1)
		gauges[addr] = new(gauge)
		m, err := obs.MasterForKey(context.Background(), leaseKey(t, a.store, store.Lease{Policy: addrlimit.DefaultPolicyName, Key: addr}))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("%d clients' slots on %d masters, want all 3", clients, len(masters))
	}
	var all gauge
	open := newGate()
	h := blockHandler(open.c, func(r *http.Request) []*gauge {
		return []*gauge{gauges[r.Header.Get("X-Forwarded-For")], &all}
	})
	fleet := serveFleet(t, h, open, a, b)
	var urls, xff []string
	for i := range clients * (n + k) {
		urls = append(urls, fleet[i%2].srv.URL)
		xff = append(xff, fmt.Sprint("198.51.100.", i/(n+k)+1))
	}
	got := sendAll(t, urls, xff)
	early := settle(t, got, len(urls), all.entered.Load)
	notDegraded(t, nil, a, b)
	for addr, g := range gauges {
		if e, m := g.entered.Load(), g.most.Load(); e != n || m != n {
			t.Fatalf("client %s: %d handlers ran, at most %d at once; want exactly %d", addr, e, m, n)
		}
		if z := zcard(t, obs, a.store, store.Lease{Policy: addrlimit.DefaultPolicyName, Key: addr}); z != n {
			t.Fatalf("client %s: ZCARD %d while its handlers run, want %d", addr, z, n)
		}
	}
	if len(early) != clients*k {
		t.Fatalf("%d refused, want %d", len(early), clients*k)
	}
	refusals(t, early, 429)
	open.let()
	finish(t, got, clients*n)
	notDegraded(t, nil, a, b)
	for addr := range gauges {
		if z := zcard(t, obs, a.store, store.Lease{Policy: addrlimit.DefaultPolicyName, Key: addr}); z != 0 {
			t.Fatalf("client %s: ZCARD %d after its handlers returned, want 0", addr, z)
		}
	}
	t.Logf("%d clients × %d requests on 3 masters: %d handlers ran, %d refused", clients, n+k, all.entered.Load(), len(early))
}

func TestInFlightFleetCluster(t *testing.T) {
	fleetOnCluster(t, startCluster(t))
}

// attempt sends one request to url and waits until it is refused (its
// response came back) or runs (g counted one more handler entering). It
// returns the refusal, or nil and the channel its response will come on.
func attempt(t *testing.T, url string, g *gauge) (*response, <-chan response) {
	t.Helper()
	before := g.entered.Load()
	got := sendAll(t, []string{url}, nil)
	if early := settle(t, got, 1, func() int64 { return g.entered.Load() - before }); len(early) == 1 {
		return &early[0], nil
	}
	return nil, got
}

// An instance that dies: B holds the loopback client's 3 slots with
// handlers that never return, then its Redis client is closed, so nothing
// renews its leases (a stalled or partitioned instance; the store-level
// TestInFlightSIGKILLedInstance kills a real process). The survivor A gets
// the 3 slots back once B's leases lapse, in Redis time: every refusal A
// gives comes before the last of them lapsed, no slot comes back before its
// lease's expiry, and the last within the lease time plus 5 s of the death.
func TestInFlightFleetDeadInstanceSlotsReturn(t *testing.T) {
	needRedis(t)
	const n, lease = 3, time.Second // a renewal every 333 ms holds on a loaded machine
	name := fmt.Sprint("inflight-dying-", time.Now().UnixNano())
	dying := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, ClientName: name})
	sopts := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithLeaseTime(lease)}
	a := newInstance(t, shared.client(t), 1000, time.Hour, sopts, addrlimit.WithInFlight(n))
	b := newInstance(t, dying, 1000, time.Hour, sopts, addrlimit.WithInFlight(n))
	obs := shared.client(t)
	var ga, gb gauge
	never, open := newGate(), newGate()
	sb := serve(t, b, blockHandler(never.c, func(*http.Request) []*gauge { return []*gauge{&gb} }), never)
	sa := serve(t, a, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&ga} }), open)

	if early := settle(t, sendAll(t, splitURLs([]*fleetServer{sb}, n), nil), n, gb.entered.Load); len(early) != 0 {
		t.Fatalf("B's first %d requests: %d refused", n, len(early))
	}
	if r, _ := attempt(t, sa.srv.URL, &ga); r == nil || r.code != 429 {
		t.Fatalf("A ran a request while B held all %d slots and renewed them", n)
	}
	notDegraded(t, nil, a, b)
	dying.Close() // B dies: its handlers still block, nothing renews their leases
	for deadline := time.Now().Add(10 * time.Second); ; {
		list, err := obs.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(list, "name="+name+" ") {
			break // Redis ran everything B sent
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis still has the dead instance's connections after 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling Redis for a state
	}
	died := serverTime(t, obs)
	zs, err := obs.ZRangeWithScores(context.Background(), leaseKey(t, a.store, loopbackLease), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	dead := map[string]bool{}
	var expiries []time.Time
	for _, z := range zs {
		dead[z.Member.(string)] = true
		expiries = append(expiries, time.UnixMicro(int64(z.Score)))
	}
	if len(expiries) != n {
		t.Fatalf("%d of B's leases held when it died, want %d (a stall of %v lapsed one?)", len(expiries), n, lease*2/3)
	}
	slices.SortFunc(expiries, time.Time.Compare)

	var running []<-chan response
	seen := map[string]bool{}
	refused := 0
	var last time.Time
	for deadline := time.Now().Add(30 * time.Second); len(running) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots back after 30 s of wall time (lease %v)", len(running), n, lease)
		}
		pre := serverTime(t, obs)
		r, got := attempt(t, sa.srv.URL, &ga)
		if r != nil {
			refusals(t, []response{*r}, 429)
			if !pre.Before(expiries[n-1]) {
				t.Fatalf("A refused at server time %v or later, when every dead lease had lapsed (the last at %v)", pre, expiries[n-1])
			}
			refused++
			time.Sleep(10 * time.Millisecond) // polling for a state
			continue
		}
		running = append(running, got)
		last = serverTime(t, obs)
		zs, err := obs.ZRangeWithScores(context.Background(), leaseKey(t, a.store, loopbackLease), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			id := z.Member.(string)
			if dead[id] || seen[id] {
				continue
			}
			seen[id] = true
			// The score is the acquisition's server time plus the lease time,
			// or later if A renewed it since: never before the acquisition.
			if at := time.UnixMicro(int64(z.Score)).Add(-lease); at.Before(expiries[len(seen)-1]) {
				t.Fatalf("slot %d back at server time %v at the latest, before B's lease expiring at %v lapsed", len(seen), at, expiries[len(seen)-1])
			}
		}
	}
	if len(seen) != n || ga.most.Load() != n {
		t.Fatalf("A holds %d new leases, %d handlers at once; want %d", len(seen), ga.most.Load(), n)
	}
	if back := last.Sub(died); back > lease+5*time.Second {
		t.Fatalf("the last slot came back %v after B died, want within the lease %v + 5 s", back, lease)
	}
	notDegraded(t, nil, a)
	open.let()
	for _, got := range running {
		finish(t, got, 1)
	}
	if z := zcard(t, obs, a.store, loopbackLease); z != 0 {
		t.Fatalf("ZCARD %d after A's handlers returned, want 0 (B's lapsed leases dropped, A's released)", z)
	}
	t.Logf("%d slots back %v after B died (server time; lease %v), %d refusals before", n, last.Sub(died), lease, refused)
}

// Redis down under FailLocal: each instance enforces WithInFlight(2)
// alone, from its own table (so at most 4 fleet-wide): 10 requests of one
// client, 5 per server, run exactly 2 handlers on each, every decision
// degraded, the 6 others 429 with Retry-After: 1. Once Redis is back, the
// fleet shares 2 again. Under FailClosed every request gets 503 with
// Retry-After: 1 and no handler runs.
func TestInFlightFleetOutage(t *testing.T) {
	const n, k = 2, 3
	t.Run("FailLocal", func(t *testing.T) {
		srv := startServer(t)
		sopts := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond)}
		lopts := []addrlimit.Option{addrlimit.WithInFlight(n), addrlimit.WithStoreFailure(addrlimit.FailLocal)}
		a := newInstance(t, srv.client(t), 1000, time.Hour, sopts, lopts...)
		b := newInstance(t, srv.client(t), 1000, time.Hour, sopts, lopts...)
		var ga, gb, all gauge
		open := newGate()
		fleet := []*fleetServer{
			serve(t, a, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&ga, &all} }), open),
			serve(t, b, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&gb, &all} }), open),
		}
		srv.stop()
		got := sendAll(t, splitURLs(fleet, 2*(n+k)), nil)
		early := settle(t, got, 2*(n+k), all.entered.Load)
		if ea, eb, m := ga.entered.Load(), gb.entered.Load(), all.most.Load(); ea != n || eb != n || m != 2*n || len(early) != 2*k {
			t.Fatalf("Redis down, %d requests over 2 instances: %d and %d handlers ran (%d at once), %d refused; want %d each (%d at once) and %d refused",
				2*(n+k), ea, eb, m, len(early), n, 2*n, 2*k)
		}
		refusals(t, early, 429)
		for i, in := range []*instance{a, b} {
			if d := len(in.degraded()); d != n+k {
				t.Fatalf("instance %d: %d degraded decisions during the outage, want all %d", i, d, n+k)
			}
		}
		open.let()
		finish(t, got, 2*n)
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, a.store, b.store)
		var g gauge
		again := newGate()
		h := blockHandler(again.c, func(*http.Request) []*gauge { return []*gauge{&g} })
		overN(t, srv.client(t), serveFleet(t, h, again, a, b), &g, again, n, 2*k)
	})
	t.Run("FailClosed", func(t *testing.T) {
		srv := startServer(t)
		sopts := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond)}
		lopts := []addrlimit.Option{addrlimit.WithInFlight(n), addrlimit.WithStoreFailure(addrlimit.FailClosed)}
		a := newInstance(t, srv.client(t), 1000, time.Hour, sopts, lopts...)
		b := newInstance(t, srv.client(t), 1000, time.Hour, sopts, lopts...)
		var g gauge
		open := newGate()
		fleet := serveFleet(t, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&g} }), open, a, b)
		srv.stop()
		early := settle(t, sendAll(t, splitURLs(fleet, 2*(n+k)), nil), 2*(n+k), g.entered.Load)
		if e := g.entered.Load(); e != 0 || len(early) != 2*(n+k) {
			t.Fatalf("FailClosed, Redis down: %d handlers ran, %d refused; want 0 and %d", e, len(early), 2*(n+k))
		}
		refusals(t, early, 503)
	})
}

// A long request keeps its slot past 4 lease times of Redis time, its
// lease renewed by its Limiter every third of the lease time, while every
// competing request of the client, on either instance, gets 429; once it
// returns, the next one runs.
func TestInFlightFleetLongRequestRenewed(t *testing.T) {
	needRedis(t)
	const lease = time.Second // a renewal every 333 ms; a stall of 667 ms would lapse it
	sopts := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithLeaseTime(lease)}
	a := newInstance(t, shared.client(t), 1000, time.Hour, sopts, addrlimit.WithInFlight(1))
	b := newInstance(t, shared.client(t), 1000, time.Hour, sopts, addrlimit.WithInFlight(1))
	obs := shared.client(t)
	var g gauge
	open := newGate()
	fleet := serveFleet(t, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&g} }), open, a, b)
	r, long := attempt(t, fleet[0].srv.URL, &g)
	if r != nil {
		t.Fatalf("the long request refused: %d", r.code)
	}
	start := serverTime(t, obs) // after the acquisition
	first, err := obs.ZRangeWithScores(context.Background(), leaseKey(t, a.store, loopbackLease), 0, -1).Result()
	if err != nil || len(first) != 1 {
		t.Fatalf("the long request's lease: %v, %v; want one", first, err)
	}
	refused := 0
	for now := start; now.Before(start.Add(4 * lease)); now = serverTime(t, obs) {
		if r, _ := attempt(t, fleet[refused%2].srv.URL, &g); r == nil {
			t.Fatalf("a competing request ran %v after the long one started (server time; lease %v)", now.Sub(start), lease)
		} else {
			refusals(t, []response{*r}, 429)
		}
		refused++
		time.Sleep(50 * time.Millisecond) // polling Redis time
	}
	zs, err := obs.ZRangeWithScores(context.Background(), leaseKey(t, a.store, loopbackLease), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 1 || zs[0].Member != first[0].Member || time.UnixMicro(int64(zs[0].Score)).Before(start.Add(4*lease)) {
		t.Fatalf("after 4 lease times, the set holds %v; want the long request's lease %v, renewed past %v", zs, first[0].Member, start.Add(4*lease))
	}
	notDegraded(t, nil, a, b)
	open.let()
	finish(t, long, 1)
	if z := zcard(t, obs, a.store, loopbackLease); z != 0 {
		t.Fatalf("ZCARD %d after the long request returned, want 0", z)
	}
	t.Logf("the long request held its slot for %v (lease %v): %d competing requests refused", serverTime(t, obs).Sub(start), lease, refused)
}

// Redis unreachable when the handlers return (a proxy in front of it cuts
// every connection): the Limiter's releases fail, and it retries them at
// its next renewal tick once Redis is reachable again, so the 3 slots are
// freed in Redis before their leases (10 s) would have lapsed: never
// leaked for longer than the lease, and freed sooner than it.
func TestInFlightFleetReleaseSurvivesABlip(t *testing.T) {
	needRedis(t)
	const n = 3
	p := newFlapProxy(t, shared.addr())
	sopts := []redisstore.Option{redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond)}
	a := newInstance(t, p.client(t), 1000, time.Hour, sopts, addrlimit.WithInFlight(n))
	obs := shared.client(t)
	var g gauge
	open := newGate()
	fleet := serveFleet(t, blockHandler(open.c, func(*http.Request) []*gauge { return []*gauge{&g} }), open, a)
	got := sendAll(t, splitURLs(fleet, n), nil)
	if early := settle(t, got, n, g.entered.Load); len(early) != 0 {
		t.Fatalf("%d of the first %d requests refused", len(early), n)
	}
	notDegraded(t, nil, a)
	p.setDown(true)
	open.let()
	finish(t, got, n)
	if se := a.lim.Stats().StoreErrors; se < n {
		t.Fatalf("%d store errors after %d releases with Redis unreachable, want at least %d", se, n, n)
	}
	zs, err := obs.ZRangeWithScores(context.Background(), leaseKey(t, a.store, loopbackLease), 0, -1).Result()
	if err != nil || len(zs) != n {
		t.Fatalf("after the failed releases the set holds %v, %v; want the %d leases", zs, err, n)
	}
	lapse := time.UnixMicro(int64(zs[0].Score)) // the earliest expiry
	p.setDown(false)
	back := serverTime(t, obs)
	for deadline := time.Now().Add(30 * time.Second); zcard(t, obs, a.store, loopbackLease) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("ZCARD %d 30 s after Redis was reachable again", zcard(t, obs, a.store, loopbackLease))
		}
		time.Sleep(20 * time.Millisecond) // polling Redis for a state
	}
	freed := serverTime(t, obs)
	if !freed.Before(lapse) {
		t.Fatalf("the slots were freed at server time %v, not before their leases lapsed at %v: the releases were not retried", freed, lapse)
	}
	t.Logf("failed releases retried: slots freed %v after Redis was reachable again, %v before their leases would have lapsed (lease %v)", freed.Sub(back), lapse.Sub(freed), a.store.LeaseTime())
}
