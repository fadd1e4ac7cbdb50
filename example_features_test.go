package addrlimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"time"

	"github.com/addrlimit/addrlimit"
)

// AllowKey limits work that has no HTTP request, such as jobs per tenant in a
// queue, with the same buckets, store, counters and observers as the
// middleware. A batch may cost several tokens.
func ExampleLimiter_AllowKey() {
	lim, _ := addrlimit.New(10, time.Minute) // 10 jobs a minute per tenant
	ctx := context.Background()
	for _, batch := range []int{4, 4, 4, 2} {
		d := lim.AllowKey(ctx, "", "tenant-42", batch)
		fmt.Println(d.Outcome, "cost", d.Cost, "remaining", d.Remaining)
	}
	// Output:
	// allowed cost 4 remaining 6
	// allowed cost 4 remaining 2
	// limited cost 4 remaining 2
	// allowed cost 2 remaining 0
}

// WithCost charges expensive requests more: here the number of items in a
// batch request. The RateLimit field stays exact.
func ExampleWithCost() {
	lim, _ := addrlimit.New(100, time.Minute, addrlimit.WithCost(func(r *http.Request) int {
		n, err := strconv.Atoi(r.URL.Query().Get("items"))
		if err != nil {
			return 1
		}
		return n // below 1 is charged 1; above the burst is refused: 413, no Retry-After
	}))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, items := range []string{"30", "50", "30", "500"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/batch?items="+items, nil))
		fmt.Printf("%s %d %s retry=%q\n", items, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 30 200 "default";r=70;t=0 retry=""
	// 50 200 "default";r=20;t=0 retry=""
	// 30 429 "default";r=20;t=0 retry="6"
	// 500 413  retry=""
}

// WithRefund counts only failed logins: every attempt is charged before the
// handler runs (so parallel guesses cannot exceed the budget), and a
// successful one gets its token back.
func ExampleWithRefund() {
	lim, _ := addrlimit.New(3, time.Hour, addrlimit.WithRefund(func(status int) bool { return status < 400 }))
	login := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "right" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	}))
	for _, pw := range []string{"right", "right", "right", "right", "a", "b", "c", "d", "right"} {
		w := httptest.NewRecorder()
		login.ServeHTTP(w, httptest.NewRequest("POST", "/login?password="+pw, nil))
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 200 200 200 401 401 401 429 429
}

// Identity, not address, for customers too: a partner identified by a
// verified API key gets its own, larger budget; anonymous clients keep the
// per-address one.
func ExampleWithPolicySelector() {
	apiKeys := map[string]string{"pk-live-acme-0123456789": "acme"} // verified credentials
	lim, _ := addrlimit.New(2, time.Minute,
		addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 1000, Interval: time.Minute / 1000}}}),
		addrlimit.WithPolicySelector(func(r *http.Request) (policy, key string, err error) {
			if partner, ok := apiKeys[r.Header.Get("X-Api-Key")]; ok {
				return "partner", "partner:" + partner, nil
			}
			return "", "", nil // the default policy, by address
		}))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"", "", "", "pk-live-acme-0123456789", "pk-forged"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "default";q=2;w=60
	// 200 "default";q=2;w=60
	// 429 "default";q=2;w=60
	// 200 "partner";q=1000;w=60
	// 429 "default";q=2;w=60
}

// Peek shows a client's quota without spending it, for a status page; Reset
// unblocks a customer.
func ExampleLimiter_Reset() {
	lim, _ := addrlimit.New(2, time.Hour)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.23:5000"
	for range 3 {
		lim.Allow(r)
	}
	ctx := context.Background()
	key := addrlimit.AddrKey(netip.MustParseAddr("198.51.100.23"))
	d, _ := lim.Peek(ctx, "", key)
	fmt.Println("before:", d.Outcome, d.Remaining, "retry in", d.RetryAfter.Round(time.Minute))
	_ = lim.Reset(ctx, "", key)
	d, _ = lim.Peek(ctx, "", key)
	fmt.Println("after:", d.Outcome, d.Remaining)
	fmt.Println("next request:", lim.Allow(r).Outcome)
	// Output:
	// before: limited 0 retry in 30m0s
	// after: allowed 2
	// next request: allowed
}

// Retire a secret instead of deleting it: services that still send it are
// limited like anyone, but their decisions say so, and
// Stats.RetiredTokenLimited counts them. Nobody outside can raise that alarm.
func ExampleInternalToken_WithRetired() {
	tok, _ := addrlimit.NewInternalToken("new-secret-0123456789abcdef")
	tok, _ = tok.WithRetired("old-secret-0123456789abcdef")
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithInternalToken(tok))
	for _, auth := range []string{"Bearer new-secret-0123456789abcdef", "Bearer old-secret-0123456789abcdef", "Bearer old-secret-0123456789abcdef", "Bearer junk"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", auth)
		d := lim.Allow(r)
		fmt.Println(d.Outcome, "retired:", d.RetiredToken)
	}
	s := lim.Stats()
	fmt.Println("retired limited:", s.RetiredTokenLimited, "credentialed limited:", s.CredentialedLimited)
	fmt.Println(tok)
	// Output:
	// exempt retired: false
	// allowed retired: true
	// limited retired: true
	// limited retired: false
	// retired limited: 1 credentialed limited: 2
	// InternalToken(1 secrets, 1 retired)
}

// Behind a reverse proxy that reaches the API over a Unix socket, trust the
// socket peer explicitly; otherwise every client shares one bucket.
func ExampleTrustedProxies_WithUnixSocket() {
	tp, _ := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	tp = tp.WithUnixSocket()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@" // what net/http reports for a Unix socket peer
	r.Header.Set("X-Forwarded-For", "203.0.113.50")
	fmt.Println(tp.Key(r))
	// Output: 203.0.113.50 <nil>
}

// One IPv6 site holds 65,536 /64s, each with its own bucket. To give a whole
// /48 (and an IPv4 /24) one shared ceiling as well, stack a second limiter
// keyed by the larger network at a multiple of the per-address limit. Turn it
// on when floods come from few large networks; leave it off when many
// customers share one network (carrier-grade NAT, a university).
func Example_networkBudget() {
	network := func(r *http.Request) (string, error) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr) // or TrustedProxies.ClientAddr behind proxies
		if err != nil {
			return "", err // charged to UnkeyedKey, never a bypass
		}
		a, bits := ap.Addr().Unmap(), 24
		if a.Is6() {
			bits = 48
		}
		p, _ := a.Prefix(bits)
		return p.String(), nil
	}
	perAddress, _ := addrlimit.New(2, time.Hour)
	perNetwork, _ := addrlimit.New(2*4, time.Hour, addrlimit.WithName("network"), addrlimit.WithKeyFunc(network))
	// The per-address limiter outside: a request it denies costs the network
	// nothing, so one drained /64 cannot spend its siblings' share.
	h := perAddress.Handler(perNetwork.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	served := 0
	for i := range 100 { // one /48, 100 different /64s, 2 requests each
		for range 2 {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = fmt.Sprintf("[2001:db8:1:%x::1]:443", i)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == http.StatusOK {
				served++
			}
		}
	}
	fmt.Println("served from one /48:", served)
	// Output: served from one /48: 8
}

// Decide limits calls of a transport without net/http (here a line-based
// protocol on a raw TCP connection): describe who makes the call and what
// it is, and send the quota where the protocol carries it. The internal
// token, the counters, the store and the observers are those of the HTTP
// middleware.
func ExampleLimiter_Decide() {
	tok, _ := addrlimit.NewInternalToken("example-internal-secret-0123456789")
	lim, _ := addrlimit.New(2, time.Hour, addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			if d.Outcome == addrlimit.Limited {
				fmt.Println("observed:", d.Route, d.Key, d.Outcome)
			}
		}))
	peer := netip.MustParseAddr("192.0.2.1") // from conn.RemoteAddr()
	for range 3 {
		d := lim.Decide(context.Background(), addrlimit.Call{Addr: peer, Route: "RCPT"})
		if d.Denied() {
			fmt.Println("450 try again in", d.RetryAfter.Round(time.Minute))
			continue
		}
		lim.QuotaFields(d, func(name, value string) { fmt.Printf("%s: %s\n", name, value) })
	}
	internal := addrlimit.Call{Addr: peer, Route: "RCPT", Authorization: []string{"Bearer example-internal-secret-0123456789"}}
	fmt.Println("internal:", lim.Decide(context.Background(), internal).Outcome)
	// Output:
	// ratelimit-policy: "default";q=2;w=3600
	// ratelimit: "default";r=1;t=0
	// ratelimit-policy: "default";q=2;w=3600
	// ratelimit: "default";r=0;t=1800
	// observed: RCPT 192.0.2.1 limited
	// 450 try again in 30m0s
	// internal: exempt
}
