package addrlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// allowRespond is the middleware of a framework without a net/http slot
// (gin), built from Allow and Respond.
func allowRespond(lim *addrlimit.Limiter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lim.Respond(w, r, lim.Allow(r)) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

func TestRespondWritesWhatHandlerWrites(t *testing.T) {
	tok := mustToken(t, secret)
	denied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := addrlimit.DecisionFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(d.Outcome.String() + " " + map[bool]string{true: "with", false: "without"}[ok]))
	})
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"draft", nil},
		{"x-ratelimit", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}},
		{"denied handler", []addrlimit.Option{addrlimit.WithDeniedHandler(denied)}},
		{"dry run", []addrlimit.Option{addrlimit.WithDryRun()}},
		{"fail closed", []addrlimit.Option{addrlimit.WithStore(newDownStore()), addrlimit.WithStoreFailure(addrlimit.FailClosed)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]addrlimit.Option{addrlimit.WithInternalToken(tok)}, tc.opts...)
			viaHandler := mustNew(t, 2, time.Hour, opts...).Handler(okHandler)
			viaRespond := allowRespond(mustNew(t, 2, time.Hour, opts...), okHandler)
			for i, r := range []*http.Request{
				req("192.0.2.1:1"), req("192.0.2.1:1"), req("192.0.2.1:1"), req("192.0.2.1:1"),
				req("192.0.2.2:1", "Authorization", "Bearer "+secret),
			} {
				want, got := serve(viaHandler, r), serve(viaRespond, r.Clone(context.Background()))
				assert.Equal(t, want.Code, got.Code, "request %d", i+1)
				assert.Equal(t, want.Header(), got.Header(), "request %d", i+1)
				assert.Equal(t, want.Body.String(), got.Body.String(), "request %d", i+1)
			}
		})
	}
}

// newDownStore is a store that fails every call.
func newDownStore() store.Store {
	s := newFailingStore()
	s.down.Store(true)
	return s
}

func TestRespondStillRefusesADecisionOfAnotherPolicy(t *testing.T) {
	other := mustNew(t, 1, time.Hour, addrlimit.WithName("other"))
	lim := mustNew(t, 1, time.Hour)
	other.Allow(req("192.0.2.1:1"))
	d := other.Allow(req("192.0.2.1:1"))
	require.True(t, d.Denied())
	w := httptest.NewRecorder()
	assert.True(t, lim.Respond(w, req("192.0.2.1:1"), d))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "quota unknown to this limiter")
	assert.Empty(t, w.Header().Get("RateLimit"), "no fields of a policy it does not have")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))

	w = httptest.NewRecorder()
	assert.False(t, lim.Respond(w, req("192.0.2.1:1"), other.Allow(req("192.0.2.9:1"))))
	assert.Empty(t, w.Header())
}

func TestRespondLeavesAnExemptRequestUntouched(t *testing.T) {
	w := httptest.NewRecorder()
	lim := mustNew(t, 1, time.Hour)
	assert.False(t, lim.Respond(w, req("192.0.2.1:1"), addrlimit.Decision{Outcome: addrlimit.Exempt}))
	assert.Empty(t, w.Header())
}

// A Decision that is none (the zero value, as DecisionFromContext returns
// when it finds nothing, or an outcome no Limiter makes) is refused as one
// of an unknown quota: no mistake in the caller lets a request through.
func TestRespondRefusesWhatIsNotADecision(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	missing, ok := addrlimit.DecisionFromContext(context.Background())
	require.False(t, ok)
	for name, d := range map[string]addrlimit.Decision{
		"zero":            missing,
		"unknown outcome": {Outcome: 99, Policy: "default", Remaining: 1},
	} {
		w := httptest.NewRecorder()
		assert.True(t, lim.Respond(w, req("192.0.2.1:1"), d), name)
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, name)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), name)
		assert.Empty(t, w.Header().Get("RateLimit"), name)
	}
}

func TestRefundGivesBackWhatAllowCharged(t *testing.T) {
	lim := mustNew(t, 3, time.Hour, addrlimit.WithCost(costFromHeader))
	d := lim.Allow(req("192.0.2.1:1", "X-Cost", "2"))
	require.Equal(t, 1, d.Remaining)
	lim.Refund(context.Background(), d)
	assert.Equal(t, 2, lim.Allow(req("192.0.2.1:1")).Remaining, "3 - 2 + 2 - 1")

	limited := lim.Allow(req("192.0.2.1:1", "X-Cost", "3"))
	require.Equal(t, addrlimit.Limited, limited.Outcome)
	lim.Refund(context.Background(), limited)
	assert.Equal(t, 1, lim.Allow(req("192.0.2.1:1")).Remaining, "a limited decision charged nothing and gets nothing back")

	other := mustNew(t, 3, time.Hour, addrlimit.WithName("other"))
	lim.Refund(context.Background(), other.Allow(req("192.0.2.1:1")))
	assert.Equal(t, 0, lim.Allow(req("192.0.2.1:1")).Remaining, "a decision of a policy this limiter does not have refunds nothing")
	assert.Equal(t, uint64(1), lim.Stats().Refunded)
}

func TestRefundOfAnAllowKeyDecisionSurvivesACancelledContext(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	d := lim.AllowKey(context.Background(), "", "job:7", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lim.Refund(ctx, d)
	assert.Equal(t, addrlimit.Allowed, lim.AllowKey(context.Background(), "", "job:7", 1).Outcome)
}

func TestDecisionInContextReachesTheHandlerOnlyWhenAskedFor(t *testing.T) {
	tok := mustToken(t, secret)
	var got addrlimit.Decision
	var ok bool
	status := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = addrlimit.DecisionFromContext(r.Context())
	})
	for _, tc := range []struct {
		name   string
		opts   []addrlimit.Option
		r      *http.Request
		wantOK bool
	}{
		{"default: not stored", nil, req("192.0.2.1:1"), false},
		{"opt-in", []addrlimit.Option{addrlimit.WithDecisionInContext()}, req("192.0.2.1:1"), true},
		{"opt-in with refunds", []addrlimit.Option{addrlimit.WithDecisionInContext(), addrlimit.WithRefund(failedOnly)}, req("192.0.2.1:1"), true},
		{"opt-in, exempt request untouched", []addrlimit.Option{addrlimit.WithDecisionInContext()}, req("192.0.2.1:1", "Authorization", "Bearer "+secret), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok = addrlimit.Decision{}, false
			lim := mustNew(t, 5, time.Hour, append([]addrlimit.Option{addrlimit.WithInternalToken(tok)}, tc.opts...)...)
			serve(lim.Handler(status), tc.r)
			require.Equal(t, tc.wantOK, ok)
			if ok {
				assert.Equal(t, addrlimit.Allowed, got.Outcome)
				assert.Equal(t, 4, got.Remaining)
				assert.Equal(t, addrlimit.AddrKey(netipAddr("192.0.2.1")), got.Key)
			}
		})
	}
}

// refundRecorder is a memory store that records the n of every Refund.
type refundRecorder struct {
	store.Store
	mu sync.Mutex
	ns []int
}

func (s *refundRecorder) Refund(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	s.mu.Lock()
	s.ns = append(s.ns, n)
	s.mu.Unlock()
	return s.Store.Refund(ctx, key, p, n)
}

// Refund keeps the Store contract (1 <= n <= Burst): a decision whose cost
// is outside it (a Peek decision, a hand-built one) or that is not Allowed
// refunds nothing and is not counted.
func TestRefundSendsTheStoreOnlyCostsItCanRefund(t *testing.T) {
	st := &refundRecorder{Store: addrlimit.NewTestMemoryStore(100)}
	lim := mustNew(t, 3, time.Hour, addrlimit.WithStore(st))
	ctx := context.Background()
	allowed := lim.AllowKey(ctx, "", "k", 1)
	require.Equal(t, addrlimit.Allowed, allowed.Outcome)
	require.False(t, allowed.Degraded)
	peeked, err := lim.Peek(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, addrlimit.Allowed, peeked.Outcome)
	for _, d := range []addrlimit.Decision{
		peeked,
		{Outcome: addrlimit.Allowed, Policy: addrlimit.DefaultPolicyName, Key: "k", Cost: 1000},
		{Outcome: addrlimit.Allowed, Policy: addrlimit.DefaultPolicyName, Key: "k", Cost: -1},
		{Outcome: addrlimit.Limited, Policy: addrlimit.DefaultPolicyName, Key: "k", Cost: 1},
		{Outcome: addrlimit.Allowed, Policy: addrlimit.DefaultPolicyName, Key: "k", Cost: 4},
	} {
		lim.Refund(ctx, d)
	}
	assert.Empty(t, st.ns, "refunds of n outside 1..burst or of a decision that charged nothing")
	assert.Zero(t, lim.Stats().Refunded)
	lim.Refund(ctx, allowed)
	assert.Equal(t, []int{1}, st.ns)
	assert.Equal(t, uint64(1), lim.Stats().Refunded)
}
