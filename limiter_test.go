package addrlimit_test

import (
	"context"
	"errors"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIncident replays the three observations of the incident write-up.
func TestIncident(t *testing.T) {
	tok := mustToken(t, secret)
	shared := "10.1.2.3:40000"

	t.Run("internal traffic with the token is never limited", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared, "Authorization", "Bearer "+secret) })
		if n := count(got, 200); n != 20 {
			t.Fatalf("internal requests allowed = %d of 20, codes %v", n, got)
		}
	})
	t.Run("ordinary requests from one address get exactly the limit", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared) })
		for i, c := range got {
			if want := map[bool]int{true: 200, false: 429}[i < 5]; c != want {
				t.Fatalf("request %d: code %d, want %d (all: %v)", i+1, c, want, got)
			}
		}
	})
	forged := []struct {
		name   string
		fields []string
	}{
		{"same length", []string{"Authorization", "Bearer " + strings.Repeat("x", len(secret))}},
		{"other length", []string{"Authorization", "Bearer short-wrong-token"}},
		{"prefix of the secret", []string{"Authorization", "Bearer " + secret[:len(secret)-1]}},
		{"secret plus a byte", []string{"Authorization", "Bearer " + secret + "x"}},
		{"empty token", []string{"Authorization", "Bearer "}},
		{"empty header", []string{"Authorization", ""}},
		{"wrong scheme", []string{"Authorization", "Basic " + secret}},
		{"no scheme", []string{"Authorization", secret}},
		{"token in another header", []string{"X-Internal-Token", secret}},
		{"two Authorization headers", []string{"Authorization", "Bearer " + secret, "Authorization", "Bearer " + secret}},
		{"secret with trailing garbage", []string{"Authorization", "Bearer " + secret + " x"}},
	}
	for _, tc := range forged {
		t.Run("forged token is limited like anyone: "+tc.name, func(t *testing.T) {
			h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
			got := codes(h, 20, func() *http.Request { return req(shared, tc.fields...) })
			if n := count(got, 200); n != 5 {
				t.Fatalf("allowed %d of 20, want 5: %v", n, got)
			}
			internal := tok.Require(okHandler)
			if c := serve(internal, req(shared, tc.fields...)).Code; c != http.StatusUnauthorized {
				t.Fatalf("internal route answered %d, want 401", c)
			}
		})
	}
}

func TestExemptConsumesNothing(t *testing.T) {
	tok := mustToken(t, secret)
	var seen []addrlimit.Decision
	lim := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) { seen = append(seen, d) }))
	h := lim.Handler(okHandler)
	for range 20 {
		w := serve(h, req("10.1.2.3:1", "Authorization", "bearer "+secret))
		if w.Code != 200 {
			t.Fatalf("exempt request got %d", w.Code)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				t.Fatalf("exempt response has %s: %q", f, v)
			}
		}
	}
	if got := lim.Stats().Keys; got != 0 {
		t.Fatalf("exempt traffic created %d buckets", got)
	}
	for i, d := range seen {
		if d != (addrlimit.Decision{Outcome: addrlimit.Exempt}) {
			t.Fatalf("decision %d = %+v, want a bare Exempt", i, d)
		}
	}
	got := codes(h, 6, func() *http.Request { return req("10.1.2.3:2") })
	if want := []int{200, 200, 200, 200, 200, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 20 exempt requests the address got %v, want %v", got, want)
	}
	if s := lim.Stats(); s.Exempt != 20 || s.Allowed != 5 || s.Limited != 1 {
		t.Fatalf("stats %+v", s)
	}
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
			if got := ok.Load(); got != burst {
				t.Fatalf("allowed %d of %d concurrent requests, want exactly %d", got, workers*each, burst)
			}
		})
	}
}

func TestRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustNew(t, 5, time.Second) // one token per 200ms
		r := req("192.0.2.1:1")
		for i := range 5 {
			if d := lim.Allow(r); d.Outcome != addrlimit.Allowed || d.Remaining != 4-i {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		d := lim.Allow(r)
		if d.Outcome != addrlimit.Limited || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != time.Second {
			t.Fatalf("6th request: %+v, want limited, retry in 200ms, full in 1s", d)
		}
		time.Sleep(199 * time.Millisecond)
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited || d.RetryAfter != time.Millisecond {
			t.Fatalf("after 199ms: %+v", d)
		}
		time.Sleep(time.Millisecond)
		if d := lim.Allow(r); d.Outcome != addrlimit.Allowed || d.Remaining != 0 || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("after 200ms: %+v", d)
		}
		time.Sleep(time.Second)
		for i := range 5 {
			if d := lim.Allow(r); d.Outcome != addrlimit.Allowed {
				t.Fatalf("after a full refill, request %d: %+v", i, d)
			}
		}
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited {
			t.Fatalf("a full bucket holds no more than the burst: %+v", d)
		}
		// 300/min: 300 at once, then one more every 200 ms.
		lim = mustNew(t, 300, time.Minute)
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
		if allowed != 305 {
			t.Fatalf("300/min allowed %d, want 300 at once plus 5 in the next second", allowed)
		}
	})
}

func TestHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
			lim := mustNew(t, tc.limit, tc.per, tc.opts...)
			h := lim.Handler(okHandler)
			var w *httptest.ResponseRecorder
			for range tc.nth {
				w = serve(h, req("[2001:db8::1]:1"))
			}
			if w.Code != tc.code {
				t.Errorf("%s: code %d, want %d", tc.name, w.Code, tc.code)
			}
			for f, want := range tc.fields {
				if got := w.Header().Get(f); got != want {
					t.Errorf("%s: %s = %q, want %q", tc.name, f, got, want)
				}
			}
			if w.Code == 429 && strings.Contains(w.Body.String(), "2001") {
				t.Errorf("%s: body echoes the address: %q", tc.name, w.Body.String())
			}
		}
	})
}

func TestDeniedBodyRevealsNothing(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	h := lim.Handler(okHandler)
	r := func() *http.Request {
		return req("203.0.113.9:4444", "Authorization", "Bearer leaked-token-value-123456", "X-Forwarded-For", "198.51.100.1", "Cookie", "sid=abc")
	}
	serve(h, r())
	w := serve(h, r())
	if w.Code != 429 {
		t.Fatalf("code %d", w.Code)
	}
	body := w.Body.String()
	for _, s := range []string{"203.0.113", "leaked", "198.51", "sid", "4444"} {
		if strings.Contains(body, s) || strings.Contains(fmt.Sprint(w.Header()), s) {
			t.Fatalf("response reveals %q: %q %v", s, body, w.Header())
		}
	}
}

func TestObserver(t *testing.T) {
	tok := mustToken(t, secret)
	type seen struct {
		path string
		d    addrlimit.Decision
	}
	var got []seen
	lim := mustNew(t, 1, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(r *http.Request, d addrlimit.Decision) { got = append(got, seen{r.URL.Path, d}) }),
		addrlimit.WithObserver(func(r *http.Request, d addrlimit.Decision) { got = append(got, seen{"second", d}) }))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-token-0123456789"))
	want := []addrlimit.Decision{
		{Outcome: addrlimit.Allowed, Key: "192.0.2.1", Limit: 1, Remaining: 0, RetryAfter: time.Hour, ResetAfter: time.Hour},
		{Outcome: addrlimit.Exempt},
		{Outcome: addrlimit.Limited, Key: "192.0.2.1", Limit: 1, Remaining: 0},
	}
	if len(got) != 2*len(want) {
		t.Fatalf("observers called %d times, want %d", len(got), 2*len(want))
	}
	for i, w := range want {
		d := got[2*i].d
		if got[2*i+1].path != "second" || got[2*i+1].d != d {
			t.Fatalf("observers out of order or told different decisions at %d", i)
		}
		// RetryAfter and ResetAfter depend on the clock; check them apart.
		if d.Outcome != w.Outcome || d.Key != w.Key || d.Limit != w.Limit || d.Remaining != w.Remaining {
			t.Errorf("decision %d = %+v, want %+v", i, d, w)
		}
		if w.Outcome != addrlimit.Exempt && (d.RetryAfter <= 0 || d.RetryAfter > time.Hour) {
			t.Errorf("decision %d RetryAfter = %v", i, d.RetryAfter)
		}
	}
	if s := lim.Stats(); s.CredentialedLimited != 1 || s.Limited != 1 || s.Allowed != 1 || s.Exempt != 1 {
		t.Fatalf("stats %+v", s)
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
	if w.Code != http.StatusTeapot || w.Body.String() != `{"error":"slow down"}` {
		t.Fatalf("denied handler not used: %d %q", w.Code, w.Body.String())
	}
	if inHandler.Get("Retry-After") != "60" || inHandler.Get("RateLimit") == "" || inHandler.Get("Cache-Control") != "no-store" {
		t.Fatalf("fields not set before the denied handler ran: %v", inHandler)
	}
	if dec.Outcome != addrlimit.Limited || dec.Key != "192.0.2.1" || dec.Limit != 1 {
		t.Fatalf("decision in context: %+v", dec)
	}
	if _, ok := addrlimit.DecisionFromContext(context.Background()); ok {
		t.Fatal("DecisionFromContext found a decision in an empty context")
	}
}

func TestDryRun(t *testing.T) {
	var limited int
	lim := mustNew(t, 2, time.Hour, addrlimit.WithDryRun(), addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) {
		if d.Outcome == addrlimit.Limited && d.DryRun && !d.Denied() {
			limited++
		}
	}))
	got := codes(lim.Handler(okHandler), 10, func() *http.Request { return req("192.0.2.1:1") })
	if count(got, 200) != 10 {
		t.Fatalf("dry run denied: %v", got)
	}
	if limited != 8 {
		t.Fatalf("observer saw %d dry-run limits, want 8", limited)
	}
	if s := lim.Stats(); s.Limited != 8 || s.Allowed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// failingStore fails every call while down is set, and otherwise delegates
// to a memory store.
type failingStore struct {
	down  atomic.Bool
	inner addrlimit.Store
	calls atomic.Int64
}

func newFailingStore() *failingStore {
	return &failingStore{inner: addrlimit.NewTestMemoryStore(100)}
}

var errRefused = errors.New("dial tcp 10.9.9.9:6379: connection refused")

func (s *failingStore) fail() error {
	s.calls.Add(1)
	if s.down.Load() {
		return errRefused
	}
	return nil
}

func (s *failingStore) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (addrlimit.Result, error) {
	if err := s.fail(); err != nil {
		return addrlimit.Result{}, err
	}
	return s.inner.Take(ctx, key, p, n)
}

func (s *failingStore) Refund(ctx context.Context, key string, p addrlimit.Policy, n int) (addrlimit.Result, error) {
	if err := s.fail(); err != nil {
		return addrlimit.Result{}, err
	}
	return s.inner.Refund(ctx, key, p, n)
}

func (s *failingStore) Peek(ctx context.Context, key string, p addrlimit.Policy) (addrlimit.Result, error) {
	if err := s.fail(); err != nil {
		return addrlimit.Result{}, err
	}
	return s.inner.Peek(ctx, key, p)
}

func (s *failingStore) Reset(ctx context.Context, key string, p addrlimit.Policy) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.inner.Reset(ctx, key, p)
}

func TestStoreFailure(t *testing.T) {
	tests := []struct {
		policy addrlimit.FailurePolicy
		codes  string
		quota  bool
	}{
		{addrlimit.FailLocal, "[200 200 429 429]", true},
		{addrlimit.FailOpen, "[200 200 200 200]", false},
		{addrlimit.FailClosed, "[503 503 503 503]", false},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			st := newFailingStore()
			st.down.Store(true)
			var errs int
			lim := mustNew(t, 2, time.Hour, addrlimit.WithStore(st), addrlimit.WithStoreFailure(tc.policy),
				addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) {
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
				if strings.Contains(w.Body.String(), "refused") || strings.Contains(w.Body.String(), "10.9.9.9") {
					t.Fatalf("store error reached the client: %q", w.Body.String())
				}
				if hasQuota := w.Header().Get("RateLimit") != ""; hasQuota != tc.quota {
					t.Fatalf("quota fields present = %v, want %v", hasQuota, tc.quota)
				}
				if w.Code == 503 && (w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store") {
					t.Fatalf("503 without Retry-After: %v", w.Header())
				}
			}
			if fmt.Sprint(got) != tc.codes {
				t.Fatalf("codes %v, want %s", got, tc.codes)
			}
			if errs != 4 || lim.Stats().StoreErrors != 4 {
				t.Fatalf("observer saw %d store errors, stats %d; want 4", errs, lim.Stats().StoreErrors)
			}
			// The store recovers: its own budget applies again at once.
			st.down.Store(false)
			got = codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })
			if fmt.Sprint(got) != "[200 200 429]" {
				t.Fatalf("after recovery: %v", got)
			}
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
		{"empty name", 10, time.Minute, []addrlimit.Option{addrlimit.WithName("")}, "policy name is empty"},
		{"name with a quote", 10, time.Minute, []addrlimit.Option{addrlimit.WithName(`a"b`)}, "outside A-Z"},
		{"name with a colon", 10, time.Minute, []addrlimit.Option{addrlimit.WithName("a:b")}, "outside A-Z"},
		{"long name", 10, time.Minute, []addrlimit.Option{addrlimit.WithName(strings.Repeat("n", 65))}, "longer than the maximum"},
		{"duplicate policy", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy("p", 1, time.Second), addrlimit.WithPolicy("p", 2, time.Second)}, `two policies are named "p"`},
		{"named like the default", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy("default", 1, time.Second)}, `two policies are named "default"`},
		{"policy zero limit", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy("p", 0, time.Second)}, `policy "p": limit must be at least 1`},
		{"policy zero period", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy("p", 1, 0)}, `policy "p": period must be positive`},
		{"policy bad name", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicy("p p", 1, time.Second)}, "outside A-Z"},
		{"nil selector", 10, time.Minute, []addrlimit.Option{addrlimit.WithPolicySelector(nil)}, "nil function"},
		{"nil cost", 10, time.Minute, []addrlimit.Option{addrlimit.WithCost(nil)}, "nil function"},
		{"nil refund", 10, time.Minute, []addrlimit.Option{addrlimit.WithRefund(nil)}, "nil function"},
		{"nil token", 10, time.Minute, []addrlimit.Option{addrlimit.WithInternalToken(nil)}, "nil token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := addrlimit.New(tc.limit, tc.per, tc.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			if !strings.HasPrefix(err.Error(), "addrlimit: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want prefix \"addrlimit: \" and %q", err, tc.wantErr)
			}
		})
	}
}

func TestNilHandlersPanicAtWiringTime(t *testing.T) {
	for name, f := range map[string]func(){
		"Handler": func() { mustNew(t, 1, time.Second).Handler(nil) },
		"Require": func() { mustToken(t, secret).Require(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s(nil) did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[addrlimit.Outcome]string{addrlimit.Allowed: "allowed", addrlimit.Limited: "limited", addrlimit.Exempt: "exempt", 0: "Outcome(0)"} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", o, got, want)
		}
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
		addrlimit.WithPolicy("partner", 10, time.Hour),
		addrlimit.WithPolicySelector(func(*http.Request) (string, string, error) { return "partner", "acme", nil }))
	w := serve(lim.Handler(okHandler), req("192.0.2.1:1"))
	assert.Equal(t, 503, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Empty(t, w.Header().Get("RateLimit"), "the quota is unknown")
	assert.NotContains(t, w.Body.String(), "10.9.9.9")
}
