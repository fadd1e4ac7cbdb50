package addrlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExemptConsumesNothing(t *testing.T) {
	tok := mustToken(t, secret)
	var seen []addrlimit.Decision
	lim := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { seen = append(seen, d) }))
	h := lim.Handler(okHandler)
	for range 20 {
		w := serve(h, req("10.1.2.3:1", "Authorization", "bearer "+secret))
		require.Equal(t, 200, w.Code, "exempt request")
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			require.Empty(t, w.Header().Get(f), "exempt response has %s", f)
		}
	}
	assert.Zero(t, lim.Stats().Keys, "exempt traffic created buckets")
	for i, d := range seen {
		require.Equal(t, addrlimit.Decision{Outcome: addrlimit.Exempt, Route: "/"}, d, "decision %d, want a bare Exempt with its route", i)
	}
	got := codes(h, 6, func() *http.Request { return req("10.1.2.3:2") })
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, got, "the address after 20 exempt requests")
	s := lim.Stats()
	assert.Equal(t, uint64(20), s.Exempt, "stats %+v", s)
	assert.Equal(t, uint64(5), s.Allowed, "stats %+v", s)
	assert.Equal(t, uint64(1), s.Limited, "stats %+v", s)
}

func TestExactUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
		kf   bool
	}{
		{"default key", nil, false},
		{"custom key function", []addrlimit.Option{addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const burst, workers, each = 100, 32, 40
			lim := mustNew(t, burst, time.Hour, tc.opts...)
			h := lim.Handler(okHandler)
			var ok atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range each {
						if serve(h, req(fmt.Sprintf("203.0.113.7:%d", 1000+w))).Code == 200 {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(burst), ok.Load(), "allowed of %d concurrent requests, want exactly the burst", workers*each)
		})
	}
}

func TestRefill(t *testing.T) {
	t.Run("5 per second", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := mustNew(t, 5, time.Second) // one token per 200ms
			r := req("192.0.2.1:1")
			for i := range 5 {
				d := lim.Allow(r)
				require.Equal(t, addrlimit.Allowed, d.Outcome, "request %d: %+v", i, d)
				require.Equal(t, 4-i, d.Remaining, "request %d: %+v", i, d)
			}
			d := lim.Allow(r)
			require.Equal(t, addrlimit.Limited, d.Outcome, "6th request: %+v", d)
			require.Equal(t, 200*time.Millisecond, d.RetryAfter, "6th request: %+v", d)
			require.Equal(t, time.Second, d.ResetAfter, "6th request: %+v", d)
			time.Sleep(199 * time.Millisecond)
			d = lim.Allow(r)
			require.Equal(t, addrlimit.Limited, d.Outcome, "after 199ms: %+v", d)
			require.Equal(t, time.Millisecond, d.RetryAfter, "after 199ms: %+v", d)
			time.Sleep(time.Millisecond)
			d = lim.Allow(r)
			require.Equal(t, addrlimit.Allowed, d.Outcome, "after 200ms: %+v", d)
			require.Equal(t, 0, d.Remaining, "after 200ms: %+v", d)
			require.Equal(t, 200*time.Millisecond, d.RetryAfter, "after 200ms: %+v", d)
			time.Sleep(time.Second)
			for i := range 5 {
				d := lim.Allow(r)
				require.Equal(t, addrlimit.Allowed, d.Outcome, "after a full refill, request %d: %+v", i, d)
			}
			d = lim.Allow(r)
			assert.Equal(t, addrlimit.Limited, d.Outcome, "a full bucket holds no more than the burst: %+v", d)
		})
	})
	t.Run("300 per minute", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// 300/min: 300 at once, then one more every 200 ms.
			lim := mustNew(t, 300, time.Minute)
			r := req("192.0.2.1:1")
			allowed := 0
			for range 400 {
				if lim.Allow(r).Outcome == addrlimit.Allowed {
					allowed++
				}
			}
			time.Sleep(time.Second)
			for range 10 {
				if lim.Allow(r).Outcome == addrlimit.Allowed {
					allowed++
				}
			}
			assert.Equal(t, 305, allowed, "300/min: want 300 at once plus 5 in the next second")
		})
	})
}

func TestHeaders(t *testing.T) {
	tests := []struct {
		name   string
		opts   []addrlimit.Option
		limit  int
		per    time.Duration
		nth    int // which request to inspect
		code   int
		fields map[string]string // "" = must be absent
	}{
		{"draft, first request", nil, 300, time.Minute, 1, 200, map[string]string{
			"RateLimit-Policy": `"default";q=300;w=60`, "RateLimit": `"default";r=299;t=0`, "Retry-After": "", "Cache-Control": ""}},
		{"draft, last token", nil, 300, time.Minute, 300, 200, map[string]string{
			"RateLimit": `"default";r=0;t=1`}},
		{"draft, limited", nil, 300, time.Minute, 301, 429, map[string]string{
			"RateLimit-Policy": `"default";q=300;w=60`, "RateLimit": `"default";r=0;t=1`, "Retry-After": "1", "Cache-Control": "no-store",
			"Content-Type": "text/plain; charset=utf-8"}},
		{"Retry-After from the bucket, not the window", nil, 3, time.Minute, 4, 429, map[string]string{
			"RateLimit-Policy": `"default";q=3;w=60`, "RateLimit": `"default";r=0;t=20`, "Retry-After": "20"}},
		{"Retry-After rounds up", nil, 2, 3 * time.Second, 3, 429, map[string]string{"Retry-After": "2"}},
		{"burst changes q and w", []addrlimit.Option{addrlimit.WithBurst(10)}, 300, time.Minute, 1, 200, map[string]string{
			"RateLimit-Policy": `"default";q=10;w=2`, "RateLimit": `"default";r=9;t=0`}},
		{"large burst formats past the precomputed values", []addrlimit.Option{addrlimit.WithBurst(5000)}, 5000, time.Hour, 1, 200, map[string]string{
			"RateLimit": `"default";r=4999;t=0`}},
		{"x-ratelimit", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}, 3, time.Minute, 2, 200, map[string]string{
			"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40", "RateLimit": ""}},
		{"x-ratelimit limited", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}, 3, time.Minute, 4, 429, map[string]string{
			"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60", "Retry-After": "20"}},
		{"none", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}, 3, time.Minute, 1, 200, map[string]string{
			"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": ""}},
		{"none still sends Retry-After when limited", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}, 3, time.Minute, 4, 429, map[string]string{
			"RateLimit": "", "Retry-After": "20", "Cache-Control": "no-store"}},
		{"dry run sets quota but never denies", []addrlimit.Option{addrlimit.WithDryRun()}, 3, time.Minute, 4, 200, map[string]string{
			"RateLimit": `"default";r=0;t=20`, "Retry-After": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := mustNew(t, tc.limit, tc.per, tc.opts...)
				h := lim.Handler(okHandler)
				var w *httptest.ResponseRecorder
				for range tc.nth {
					w = serve(h, req("[2001:db8::1]:1"))
				}
				assert.Equal(t, tc.code, w.Code, "code")
				for f, want := range tc.fields {
					assert.Equal(t, want, w.Header().Get(f), "field %s", f)
				}
				if w.Code == 429 {
					assert.NotContains(t, w.Body.String(), "2001", "body echoes the address")
				}
			})
		})
	}
}

func TestDeniedBodyRevealsNothing(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	h := lim.Handler(okHandler)
	r := func() *http.Request {
		return req("203.0.113.9:4444", "Authorization", "Bearer leaked-token-value-123456", "X-Forwarded-For", "198.51.100.1", "Cookie", "sid=abc")
	}
	serve(h, r())
	w := serve(h, r())
	require.Equal(t, 429, w.Code)
	body := w.Body.String()
	for _, s := range []string{"203.0.113", "leaked", "198.51", "sid", "4444"} {
		assert.NotContains(t, body, s, "body reveals %q", s)
		assert.NotContains(t, fmt.Sprint(w.Header()), s, "header reveals %q", s)
	}
}

func TestDeniedHandler(t *testing.T) {
	var inHandler http.Header
	var dec addrlimit.Decision
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = w.Header().Clone()
		dec, _ = addrlimit.DecisionFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"error":"slow down"}`))
	})
	lim := mustNew(t, 1, time.Minute, addrlimit.WithDeniedHandler(deny))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	w := serve(h, req("192.0.2.1:1"))
	require.Equal(t, http.StatusTeapot, w.Code, "denied handler not used")
	require.Equal(t, `{"error":"slow down"}`, w.Body.String(), "denied handler not used")
	// The fields are set before the denied handler runs.
	assert.Equal(t, "60", inHandler.Get("Retry-After"), "fields in the denied handler: %v", inHandler)
	assert.NotEmpty(t, inHandler.Get("RateLimit"), "fields in the denied handler: %v", inHandler)
	assert.Equal(t, "no-store", inHandler.Get("Cache-Control"), "fields in the denied handler: %v", inHandler)
	assert.Equal(t, addrlimit.Limited, dec.Outcome, "decision in context: %+v", dec)
	assert.Equal(t, "192.0.2.1", dec.Key, "decision in context: %+v", dec)
	assert.Equal(t, 1, dec.Limit().Burst, "decision in context: %+v", dec)
	_, ok := addrlimit.DecisionFromContext(context.Background())
	assert.False(t, ok, "DecisionFromContext found a decision in an empty context")
}

func TestDryRun(t *testing.T) {
	var limited int
	lim := mustNew(t, 2, time.Hour, addrlimit.WithDryRun(), addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		if d.Outcome == addrlimit.Limited && d.DryRun && !d.Denied() {
			limited++
		}
	}))
	got := codes(lim.Handler(okHandler), 10, func() *http.Request { return req("192.0.2.1:1") })
	require.Equal(t, 10, count(got, 200), "dry run denied: %v", got)
	assert.Equal(t, 8, limited, "dry-run limits the observer saw")
	s := lim.Stats()
	assert.Equal(t, uint64(8), s.Limited, "stats %+v", s)
	assert.Equal(t, uint64(2), s.Allowed, "stats %+v", s)
}

func TestStoreFailure(t *testing.T) {
	tests := []struct {
		policy addrlimit.FailurePolicy
		codes  []int
		quota  bool
	}{
		{addrlimit.FailLocal, []int{200, 200, 429, 429}, true},
		{addrlimit.FailOpen, []int{200, 200, 200, 200}, false},
		{addrlimit.FailClosed, []int{503, 503, 503, 503}, false},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			st := newFailingStore()
			st.down.Store(true)
			var errs int
			lim := mustNew(t, 2, time.Hour, addrlimit.WithStore(st), addrlimit.WithStoreFailure(tc.policy),
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
					if d.Err != nil && d.Degraded {
						errs++
					}
				}))
			h := lim.Handler(okHandler)
			var ws []*httptest.ResponseRecorder
			for range 4 {
				ws = append(ws, serve(h, req("192.0.2.1:1")))
			}
			var got []int
			for _, w := range ws {
				got = append(got, w.Code)
				require.NotContains(t, w.Body.String(), "refused", "store error reached the client")
				require.NotContains(t, w.Body.String(), "10.9.9.9", "store error reached the client")
				require.Equal(t, tc.quota, w.Header().Get("RateLimit") != "", "quota fields present")
				if w.Code == 503 {
					require.Equal(t, "1", w.Header().Get("Retry-After"), "503 without Retry-After: %v", w.Header())
					require.Equal(t, "no-store", w.Header().Get("Cache-Control"), "503 without Cache-Control: %v", w.Header())
				}
			}
			require.Equal(t, tc.codes, got, "codes")
			require.Equal(t, 4, errs, "store errors the observer saw")
			require.Equal(t, uint64(4), lim.Stats().StoreErrors, "store errors in the stats")
			// The store recovers: its own budget applies again at once.
			st.down.Store(false)
			got = codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })
			assert.Equal(t, []int{200, 200, 429}, got, "after recovery")
		})
	}
}

func TestNewErrors(t *testing.T) {
	valid := addrlimit.WithBurst(1)
	tests := []struct {
		name    string
		limit   int
		per     time.Duration
		opts    []addrlimit.Option
		wantErr string
	}{
		{"zero limit", 0, time.Minute, nil, "limit must be at least 1"},
		{"negative limit", -5, time.Minute, nil, "limit must be at least 1"},
		{"zero period", 10, 0, nil, "period must be positive"},
		{"negative period", 10, -time.Second, nil, "period must be positive"},
		{"sub-nanosecond interval", 1000, time.Nanosecond, nil, "more than one request per nanosecond"},
		{"zero burst", 10, time.Minute, []addrlimit.Option{addrlimit.WithBurst(0)}, "burst must be at least 1"},
		{"overflowing burst", 10, time.Hour, []addrlimit.Option{addrlimit.WithBurst(1 << 40)}, "overflows"},
		{"zero max keys", 10, time.Minute, []addrlimit.Option{addrlimit.WithMaxKeys(0)}, "max keys must be at least 1"},
		{"nil key func", 10, time.Minute, []addrlimit.Option{addrlimit.WithKeyFunc(nil)}, "nil KeyFunc"},
		{"nil exempt", 10, time.Minute, []addrlimit.Option{addrlimit.WithExempt(nil)}, "WithExempt given a nil"},
		{"nil denied handler", 10, time.Minute, []addrlimit.Option{addrlimit.WithDeniedHandler(nil)}, "nil handler"},
		{"nil observer", 10, time.Minute, []addrlimit.Option{addrlimit.WithObserver(nil)}, "WithObserver given a nil"},
		{"nil store", 10, time.Minute, []addrlimit.Option{addrlimit.WithStore(nil)}, "nil Store"},
		{"nil option", 10, time.Minute, []addrlimit.Option{valid, nil}, "option 2 is nil"},
		{"unknown header style", 10, time.Minute, []addrlimit.Option{addrlimit.WithHeaders(9)}, "unknown header style"},
		{"unknown failure policy", 10, time.Minute, []addrlimit.Option{addrlimit.WithStoreFailure(9)}, "unknown failure policy"},
		{"failure policy without a store", 10, time.Minute, []addrlimit.Option{addrlimit.WithStoreFailure(addrlimit.FailClosed)}, "WithStoreFailure needs WithStore"},
		{"default failure policy without a store", 10, time.Minute, []addrlimit.Option{addrlimit.WithStoreFailure(addrlimit.FailLocal)}, "WithStoreFailure needs WithStore"},
		{"empty name", 10, time.Minute, []addrlimit.Option{addrlimit.WithName("")}, "policy name is empty"},
		{"name with a quote", 10, time.Minute, []addrlimit.Option{addrlimit.WithName(`a"b`)}, "outside A-Z"},
		{"name with a colon", 10, time.Minute, []addrlimit.Option{addrlimit.WithName("a:b")}, "outside A-Z"},
		{"long name", 10, time.Minute, []addrlimit.Option{addrlimit.WithName(strings.Repeat("n", 65))}, "longer than the maximum"},
		{"duplicate policy", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}), addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Second / 2}}})}, `two policies are named "p"`},
		{"named like the default", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy(addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}})}, `two policies are named "default"`},
		{"policy zero burst", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Interval: time.Second}}})}, `policy "p": burst must be at least 1`},
		{"policy zero interval", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 1}}})}, `policy "p": interval must be positive`},
		{"policy bad name", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy(addrlimit.Policy{Name: "p p", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}})}, "outside A-Z"},
		{"nil selector", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicySelector(nil)}, "nil function"},
		{"nil cost", 10, time.Minute, []addrlimit.Option{addrlimit.WithCost(nil)}, "nil function"},
		{"nil refund", 10, time.Minute, []addrlimit.Option{addrlimit.WithRefund(nil)}, "nil function"},
		{"nil token", 10, time.Minute, []addrlimit.Option{addrlimit.WithInternalToken(nil)}, "nil token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := addrlimit.New(tc.limit, tc.per, tc.opts...)
			assert.Nil(t, l, "New returned a limiter with an error")
			requirePackageError(t, err, tc.wantErr)
		})
	}
}

func TestNilHandlerPanicsAtWiringTime(t *testing.T) {
	lim := mustNew(t, 1, time.Second)
	assert.Panics(t, func() { lim.Handler(nil) }, "Handler(nil) did not panic")
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[addrlimit.Outcome]string{addrlimit.Allowed: "allowed", addrlimit.Limited: "limited", addrlimit.Exempt: "exempt", 0: "Outcome(0)"} {
		assert.Equal(t, want, o.String(), "%d.String()", o)
	}
}

func TestFailLocalContinuesFromTheStoresState(t *testing.T) {
	st := newFailingStore()
	lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(st))
	h := lim.Handler(okHandler)
	// A client spends 4 of 5 through the store; another is limited there.
	require.Equal(t, "[200 200 200 200]", fmt.Sprint(codes(h, 4, func() *http.Request { return req("192.0.2.1:1") })))
	require.Equal(t, "[200 200 200 200 200 429]", fmt.Sprint(codes(h, 6, func() *http.Request { return req("192.0.2.2:1") })))
	st.down.Store(true)
	// The local buckets continue where the store left them, instead of
	// handing each client a fresh burst.
	assert.Equal(t, "[200 429 429]", fmt.Sprint(codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })))
	assert.Equal(t, "[429 429]", fmt.Sprint(codes(h, 2, func() *http.Request { return req("192.0.2.2:1") })))
	// A client the store never reported starts full.
	assert.Equal(t, 5, count(codes(h, 6, func() *http.Request { return req("192.0.2.3:1") }), 200))
	assert.Equal(t, uint64(11), lim.Stats().StoreErrors)
}

func TestFailurePolicyAppliesToEveryPolicy(t *testing.T) {
	st := newFailingStore()
	st.down.Store(true)
	lim := mustNew(t, 1, time.Hour, addrlimit.WithStore(st), addrlimit.WithStoreFailure(addrlimit.FailClosed),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour / 10}}}),
		addrlimit.WithPolicySelector(func(*http.Request) (string, string, error) { return "partner", "acme", nil }))
	w := serve(lim.Handler(okHandler), req("192.0.2.1:1"))
	assert.Equal(t, 503, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Empty(t, w.Header().Get("RateLimit"), "the quota is unknown")
	assert.NotContains(t, w.Body.String(), "10.9.9.9")
}

// scriptedStore answers Take with the given results in order, then fails.
type scriptedStore struct {
	failingStore
	answers []store.Result
}

func (s *scriptedStore) Take(_ context.Context, _ string, _ addrlimit.Policy, _ int) (store.Result, error) {
	if len(s.answers) == 0 {
		return store.Result{}, errRefused
	}
	res := s.answers[0]
	s.answers = s.answers[1:]
	return res, nil
}

func TestFailLocalKeepsTheLatestStateOfOutOfOrderAnswers(t *testing.T) {
	// Two concurrent requests: the store answered the later one (bucket
	// empty for 50 minutes) before the earlier one (one token left) reached
	// this instance. The local copy must not become fuller.
	st := &scriptedStore{answers: []store.Result{
		{Allowed: true, Remaining: 0, RetryAfter: 10 * time.Minute, ResetAfter: 50 * time.Minute},
		{Allowed: true, Remaining: 1, ResetAfter: 40 * time.Minute},
	}}
	lim := mustNew(t, 5, 50*time.Minute, addrlimit.WithStore(st)) // one token per 10 minutes
	ctx := context.Background()
	require.Equal(t, addrlimit.Allowed, lim.AllowKey(ctx, "", "k", 1).Outcome)
	require.Equal(t, addrlimit.Allowed, lim.AllowKey(ctx, "", "k", 1).Outcome)
	d := lim.AllowKey(ctx, "", "k", 1) // the store is down now
	require.True(t, d.Degraded)
	assert.Equal(t, addrlimit.Limited, d.Outcome, "the local bucket went back to the older, fuller answer")
}

func TestZeroLimiterFailsLoudlyNeverLimitsNothing(t *testing.T) {
	const msg = "addrlimit: Limiter not built with New"
	for name, l := range map[string]*addrlimit.Limiter{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			panicsWith := func(what string, f func()) {
				t.Helper()
				defer func() {
					r := recover()
					require.NotNil(t, r, "%s did not panic", what)
					assert.Equal(t, msg, fmt.Sprint(r), "%s panic", what)
				}()
				f()
			}
			panicsWith("Handler", func() { l.Handler(okHandler) })
			panicsWith("Allow", func() { l.Allow(req("192.0.2.1:1")) })
			panicsWith("AllowKey", func() { l.AllowKey(context.Background(), "", "k", 1) })
			panicsWith("Decide", func() { l.Decide(context.Background(), addrlimit.Call{}) })
			panicsWith("QuotaFields", func() { l.QuotaFields(addrlimit.Decision{}, func(string, string) {}) })
			panicsWith("Refund", func() {
				l.Refund(context.Background(), addrlimit.Decision{Outcome: addrlimit.Allowed, Policy: "default", Key: "k", Cost: 1})
			})
			panicsWith("Stats", func() { l.Stats() })
			panicsWith("Policies", func() { l.Policies() })
			panicsWith("Respond", func() {
				l.Respond(httptest.NewRecorder(), req("192.0.2.1:1"), addrlimit.Decision{Outcome: addrlimit.Limited, Policy: "default"})
			})
			_, err := l.Peek(context.Background(), "", "k")
			assert.EqualError(t, err, msg, "Peek")
			assert.EqualError(t, l.Reset(context.Background(), "", "k"), msg, "Reset")
		})
	}
}

func TestContextWithDecisionIsWhatTheDeniedHandlerGets(t *testing.T) {
	var got addrlimit.Decision
	lim := mustNew(t, 1, time.Hour, addrlimit.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = addrlimit.DecisionFromContext(r.Context())
	})))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	serve(h, req("192.0.2.1:1"))
	require.Equal(t, addrlimit.Limited, got.Outcome)
	d, ok := addrlimit.DecisionFromContext(addrlimit.ContextWithDecision(context.Background(), got))
	assert.True(t, ok)
	assert.Equal(t, got, d, "a test context carries the decision as the Limiter's does")
}
