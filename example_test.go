package addrlimit_test

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// The incident in miniature: an internal service and a public script share one
// egress address. The internal token exempts the service; the script is limited
// exactly as before, and a forged token counts like no token at all.
func Example() {
	tok, err := addrlimit.NewInternalToken("internal-secret-0123456789")
	if err != nil {
		panic(err)
	}
	lim, err := addrlimit.New(3, time.Minute, addrlimit.WithInternalToken(tok))
	if err != nil {
		panic(err)
	}
	api := http.NewServeMux()
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	api.Handle("/internal/", tok.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	h := lim.Handler(api)

	send := func(path, auth string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "10.0.0.7:41000" // the shared egress address
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for range 5 {
		fmt.Print(send("/internal/progress", "Bearer internal-secret-0123456789"), " ")
	}
	fmt.Println("internal service")
	for range 5 {
		fmt.Print(send("/", ""), " ")
	}
	fmt.Println("public script")
	fmt.Println(send("/internal/progress", "Bearer forged-token-0123456789xx"), "forged token")
	// Output:
	// 200 200 200 200 200 internal service
	// 200 200 200 429 429 public script
	// 429 forged token
}

// Allow decides without writing a response, for code that is not an
// http.Handler chain, such as a websocket upgrade or a job queue.
func ExampleLimiter_Allow() {
	lim, _ := addrlimit.New(2, time.Hour)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:1:2::17]:5000"
	for range 3 {
		d := lim.Allow(r)
		fmt.Println(d.Outcome, d.Key, d.Remaining, d.Denied())
	}
	// Output:
	// allowed 2001:db8:1:2::/64 1 false
	// allowed 2001:db8:1:2::/64 0 false
	// limited 2001:db8:1:2::/64 0 true
}

// The draft RateLimit fields report the policy and the remaining quota; a 429
// adds Retry-After, computed from the bucket.
func ExampleWithHeaders() {
	lim, _ := addrlimit.New(300, time.Minute, addrlimit.WithBurst(1))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d %s %s retry-after=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "default";q=1;w=1 "default";r=0;t=1 retry-after=""
	// 429 "default";q=1;w=1 "default";r=0;t=1 retry-after="1"
}

// With the X-RateLimit style, Reset is the number of seconds until the bucket
// is full again.
func ExampleWithHeaders_xRateLimit() {
	lim, _ := addrlimit.New(60, time.Minute, addrlimit.WithHeaders(addrlimit.HeaderXRateLimit))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println(w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset"))
	// Output: 60 59 1
}

// A dry run counts and reports, but never denies: the way to learn who would
// be limited before enforcing.
func ExampleWithDryRun() {
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithDryRun(),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			if d.Outcome == addrlimit.Limited {
				fmt.Println("would limit", d.Key, "dry run:", d.DryRun)
			}
		}))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// would limit 192.0.2.1 dry run: true
	// 200
}

// A denied handler renders its own body; the fields are already set and the
// Decision is in the request context.
func ExampleWithDeniedHandler() {
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := addrlimit.DecisionFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":"rate_limited","retry_after_seconds":%d}`, int(d.RetryAfter.Round(time.Second)/time.Second))
	})
	lim, _ := addrlimit.New(1, 10*time.Second, addrlimit.WithDeniedHandler(deny))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Body.String())
	// Output: 429 10 {"error":"rate_limited","retry_after_seconds":10}
}

// AddrKey is the normalisation behind the default key, for custom KeyFuncs.
func ExampleAddrKey() {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8:1:2:3:4:5:6", "fe80::1%eth0"} {
		fmt.Println(addrlimit.AddrKey(netip.MustParseAddr(s)))
	}
	// Output:
	// 192.0.2.1
	// 192.0.2.1
	// 2001:db8:1:2::/64
	// fe80::/64
}

// A KeyFunc can key authenticated routes per user instead of per address.
func ExampleWithKeyFunc() {
	perUser := func(r *http.Request) (string, error) {
		if u := r.Header.Get("X-User"); u != "" { // set by your authentication middleware
			return "user:" + u, nil
		}
		return addrlimit.RemoteAddrKey(r)
	}
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithKeyFunc(perUser))
	for _, u := range []string{"ann", "bob", "ann"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", u)
		d := lim.Allow(r)
		fmt.Println(d.Key, d.Outcome)
	}
	// Output:
	// user:ann allowed
	// user:bob allowed
	// user:ann limited
}

// Behind load balancers in 10.0.0.0/29 that append to X-Forwarded-For, the
// client is the first untrusted address from the right; whatever the client
// wrote further left is ignored.
func ExampleTrustedProxies_Key() {
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/29")) // the balancers only
	if err != nil {
		panic(err)
	}
	kf := proxies.Key // addrlimit.WithKeyFunc(proxies.Key)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:55000"                                   // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.0.0.2") // spoofed, client, inner proxy
	key, err := kf(r)
	fmt.Println(key, err)

	r.RemoteAddr = "203.0.113.50:1234" // a client connecting directly: headers are not read
	key, err = kf(r)
	fmt.Println(key, err)
	// Output:
	// 203.0.113.9 <nil>
	// 203.0.113.50 <nil>
}

// A CDN that sets a single-address header, reached through its published
// ranges; a handler can read the resolved address too.
func ExampleTrustedProxies_ClientAddr() {
	cdn, err := addrlimit.NewTrustedProxies("CF-Connecting-IP",
		netip.MustParsePrefix("173.245.48.0/20"), netip.MustParsePrefix("2400:cb00::/32"))
	if err != nil {
		panic(err)
	}
	lim, _ := addrlimit.New(300, time.Minute, addrlimit.WithKeyFunc(cdn.Key))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, _ := cdn.ClientAddr(r)
		fmt.Println("client", client)
	}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2400:cb00::17]:443"
	r.Header.Set("CF-Connecting-IP", "2001:db8:1:2::99")
	h.ServeHTTP(httptest.NewRecorder(), r)
	fmt.Println("key", lim.Allow(r).Key)
	// Output:
	// client 2001:db8:1:2::99
	// key 2001:db8:1:2::/64
}

// nginx in front of the app on the same host, with
// "proxy_set_header Forwarded "for=\"$remote_addr\"";" or the RFC 7239 form.
func ExampleNewTrustedProxies_forwarded() {
	p, _ := addrlimit.NewTrustedProxies("Forwarded", netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https`)
	a, err := p.ClientAddr(r)
	fmt.Println(a, err)
	r.Header.Set("Forwarded", "for=unknown")
	a, err = p.ClientAddr(r)
	fmt.Println(a, err != nil)
	// Output:
	// 2001:db8:cafe::17 <nil>
	// 127.0.0.1 true
}

// A LogObserver writes one line per throttled key per interval: here an
// internal service whose token is stale, which is exactly what to look for.
func ExampleNewLogObserver() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // stable output for the example
			}
			return a
		},
	}))
	lo, _ := addrlimit.NewLogObserver(logger, time.Minute)
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithObserver(lo.Observe))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("PUT", "/agents/42/progress", nil)
		r.RemoteAddr = "10.0.0.7:41000"
		r.Header.Set("Authorization", "Bearer stale-token-from-last-month")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// level=WARN msg="addrlimit: request with credentials limited" policy=default limit=1h key=10.0.0.7 route=/agents/42/progress outcome=limited mode=enforced cost=1 remaining=0 retry_after=1h0m0s credentialed=true retired_token=false suppressed=0
}

// Stats is cheap to read concurrently; publish it with expvar (or the
// promcollector module).
func ExampleLimiter_Stats() {
	lim, _ := addrlimit.New(1, time.Hour)
	expvar.Publish("ratelimit", expvar.Func(func() any { return lim.Stats() }))
	for range 3 {
		lim.Allow(httptest.NewRequest("GET", "/", nil))
	}
	s := lim.Stats()
	fmt.Println("allowed", s.Allowed, "limited", s.Limited, "keys", s.Keys)
	// Output: allowed 1 limited 2 keys 1
}

// Stacked limiters on a Go 1.22 ServeMux: a global per-address limit for the
// whole API, a stricter one on POST /login, and per-user keys on
// authenticated routes.
func Example_stackedLimiters() {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	global, _ := addrlimit.New(300, time.Minute)
	login, _ := addrlimit.New(5, time.Minute) // password guessing: 5 per minute per address
	perUser, _ := addrlimit.New(2, time.Minute, addrlimit.WithKeyFunc(func(r *http.Request) (string, error) {
		return "user:" + r.Header.Get("X-User"), nil // set by your authentication middleware
	}))

	mux := http.NewServeMux()
	mux.Handle("POST /login", login.Handler(ok))
	mux.Handle("GET /me/", perUser.Handler(ok))
	mux.Handle("/", ok)
	api := global.Handler(mux)

	try := func(method, path, user string, n int) {
		var got []int
		for range n {
			r := httptest.NewRequest(method, path, nil)
			r.Header.Set("X-User", user)
			w := httptest.NewRecorder()
			api.ServeHTTP(w, r)
			got = append(got, w.Code)
		}
		fmt.Println(method, path, user, got)
	}
	try("POST", "/login", "", 7)
	try("GET", "/me/settings", "ann", 3)
	try("GET", "/me/settings", "bob", 1)
	try("GET", "/sites", "", 2)
	// Output:
	// POST /login  [200 200 200 200 200 429 429]
	// GET /me/settings ann [200 200 429]
	// GET /me/settings bob [200]
	// GET /sites  [200 200]
}

// WithBurst separates the burst from the rate: 60 per minute on average, but
// only 10 at once.
func ExampleWithBurst() {
	lim, _ := addrlimit.New(60, time.Minute, addrlimit.WithBurst(10))
	r := httptest.NewRequest("GET", "/", nil)
	allowed := 0
	for range 50 {
		if !lim.Allow(r).Denied() {
			allowed++
		}
	}
	fmt.Println("allowed at once:", allowed, "policy:", lim.Policies()[0])
	// Output: allowed at once: 10 policy: {default [{10s 10 1s}] 0}
}

// WithExempt takes any predicate a client cannot forge; InternalToken.Match is
// the one addrlimit provides. Exempt requests leave no trace in the table.
func ExampleWithExempt() {
	tok, _ := addrlimit.NewInternalToken("new-secret-0123456789abcdef", "old-secret-0123456789abcdef") // rotation
	lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithExempt(tok.Match))
	for _, auth := range []string{"Bearer old-secret-0123456789abcdef", "Bearer new-secret-0123456789abcdef", "Bearer wrong", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		fmt.Println(lim.Allow(r).Outcome)
	}
	fmt.Println("buckets:", lim.Stats().Keys)
	// Output:
	// exempt
	// exempt
	// allowed
	// limited
	// buckets: 1
}

// WithMaxKeys caps the table. A flood of new addresses evicts buckets that
// still have tokens, never one that is empty: the abuser stays limited.
func ExampleWithMaxKeys() {
	lim, _ := addrlimit.New(2, time.Hour, addrlimit.WithMaxKeys(100))
	abuser := httptest.NewRequest("GET", "/", nil)
	abuser.RemoteAddr = "198.51.100.66:1"
	lim.Allow(abuser)
	lim.Allow(abuser)
	r := httptest.NewRequest("GET", "/", nil)
	for i := range 100_000 {
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&255, i&255)
		lim.Allow(r)
	}
	s := lim.Stats()
	fmt.Println("keys:", s.Keys, "abuser:", lim.Allow(abuser).Outcome)
	// Output: keys: 100 abuser: limited
}

// WithObserver sees every decision; several observers run in order.
func ExampleWithObserver() {
	count := map[addrlimit.Outcome]int{}
	lim, _ := addrlimit.New(2, time.Hour,
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { count[d.Outcome]++ }),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			if d.Denied() {
				fmt.Println("denied", d.Key, "retry in", d.RetryAfter.Round(time.Minute))
			}
		}))
	for range 3 {
		lim.Allow(httptest.NewRequest("GET", "/", nil))
	}
	fmt.Println(count)
	// Output:
	// denied 192.0.2.1 retry in 30m0s
	// map[allowed:2 limited:1]
}

// downStore is a Store whose backend is unreachable.
type downStore struct{}

var errDown = errors.New("dial tcp 10.0.0.9:6379: connection refused")

func (downStore) Take(context.Context, string, addrlimit.Policy, int) (store.Result, error) {
	return store.Result{}, errDown
}

func (downStore) Refund(context.Context, string, addrlimit.Policy, int) (store.Result, error) {
	return store.Result{}, errDown
}

func (downStore) Peek(context.Context, string, addrlimit.Policy) (store.Result, error) {
	return store.Result{}, errDown
}

func (downStore) Reset(context.Context, string, addrlimit.Policy) error { return errDown }

// WithStore sets where buckets live (for a fleet, see the redisstore module);
// WithStoreFailure decides what a store outage means: the default FailLocal
// keeps limiting with local buckets; FailClosed answers 503; FailOpen lets
// everything through. The error never reaches the client.
func ExampleWithStoreFailure() {
	for _, p := range []addrlimit.FailurePolicy{addrlimit.FailLocal, addrlimit.FailOpen, addrlimit.FailClosed} {
		lim, _ := addrlimit.New(1, time.Hour, addrlimit.WithStore(downStore{}), addrlimit.WithStoreFailure(p))
		h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var codes []int
		for range 2 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			codes = append(codes, w.Code)
		}
		fmt.Println(p, codes)
	}
	// Output:
	// local [200 429]
	// open [200 200]
	// closed [503 503]
}
