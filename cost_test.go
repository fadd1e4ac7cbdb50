package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// costFromHeader reads the cost from a test header, as a GraphQL gateway
// would from the query's complexity.
func costFromHeader(r *http.Request) int {
	n, err := strconv.Atoi(r.Header.Get("X-Cost"))
	if err != nil {
		return 1
	}
	return n
}

func TestCostIsChargedAndReportedExactly(t *testing.T) {
	// 10 per 10 s: one token per second, burst 10.
	lim := mustNew(t, 10, 10*time.Second, addrlimit.WithCost(costFromHeader))
	h := lim.Handler(okHandler)

	w := serve(h, req("192.0.2.1:1", "X-Cost", "4"))
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"default";r=6;t=0`, w.Header().Get("RateLimit"))

	w = serve(h, req("192.0.2.1:1", "X-Cost", "7"))
	require.Equal(t, 429, w.Code, "7 tokens do not fit in 6")
	assert.Equal(t, "1", w.Header().Get("Retry-After"), "one more token is needed: 1 s")
	assert.Equal(t, `"default";r=6;t=0`, w.Header().Get("RateLimit"), "a refused cost charges nothing")

	w = serve(h, req("192.0.2.1:1", "X-Cost", "6"))
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"default";r=0;t=1`, w.Header().Get("RateLimit"))

	d := lim.Allow(req("192.0.2.1:1", "X-Cost", "3"))
	assert.Equal(t, addrlimit.Limited, d.Outcome)
	assert.Equal(t, 3, d.Cost)
	assert.InDelta(t, float64(3*time.Second), float64(d.RetryAfter), float64(50*time.Millisecond), "three tokens: three seconds")
}

func TestCostOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		cost    string
		code    int
		err     error
		charged int
	}{
		{"0", 200, addrlimit.ErrInvalidCost, 1},
		{"-5", 200, addrlimit.ErrInvalidCost, 1},
		{"-9223372036854775808", 200, addrlimit.ErrInvalidCost, 1},
		{"11", 413, addrlimit.ErrCostOverBurst, 0},
		{"9223372036854775807", 413, addrlimit.ErrCostOverBurst, 0},
	} {
		t.Run(tc.cost, func(t *testing.T) {
			var got addrlimit.Decision
			lim := mustNew(t, 10, time.Hour, addrlimit.WithCost(costFromHeader),
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { got = d }))
			w := serve(lim.Handler(okHandler), req("192.0.2.1:1", "X-Cost", tc.cost))
			require.Equal(t, tc.code, w.Code)
			require.ErrorIs(t, got.Err, tc.err)
			assert.NotContains(t, w.Body.String(), "cost", "no error text reaches the client")
			if tc.code == 413 {
				assert.Empty(t, w.Header().Values("Retry-After"), "a cost over the burst is promised no later success")
				assert.Empty(t, w.Header().Values("RateLimit"), "the bucket was not asked: no quota fields")
				assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
				assert.Equal(t, "content too large\n", w.Body.String())
				assert.Zero(t, got.RetryAfter, "Decision.RetryAfter of a cost over the burst")
				assert.True(t, got.QuotaUnknown, "the bucket was not asked: its quota is unknown")
			}
			d := lim.Allow(req("192.0.2.1:1"))
			assert.Equal(t, 10-tc.charged-1, d.Remaining, "charged %d", tc.charged)
		})
	}
}

// The documented recipe, errors.Is(d.Err, ErrCostOverBurst), tells a cost
// over the burst from the 503 of FailClosed, whose unknown quota (Limit 0)
// would pass Cost > Limit.
func TestDeniedHandlerTellsCostOverBurstFromFailClosed(t *testing.T) {
	s := newFailingStore()
	type seen struct {
		overBurst bool
		d         addrlimit.Decision
	}
	var got []seen
	lim := mustNew(t, 5, time.Minute, addrlimit.WithStore(s), addrlimit.WithStoreFailure(addrlimit.FailClosed),
		addrlimit.WithCost(costFromHeader),
		addrlimit.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := addrlimit.DecisionFromContext(r.Context())
			got = append(got, seen{errors.Is(d.Err, addrlimit.ErrCostOverBurst), d})
			w.WriteHeader(http.StatusTooManyRequests)
		})))
	h := lim.Handler(okHandler)
	s.down.Store(true)
	serve(h, req("192.0.2.1:1"))                // FailClosed
	serve(h, req("192.0.2.1:1", "X-Cost", "6")) // over the burst, store down
	s.down.Store(false)
	serve(h, req("192.0.2.1:1", "X-Cost", "6")) // over the burst
	require.Len(t, got, 3)
	assert.False(t, got[0].overBurst, "a FailClosed denial is not a cost over the burst: %+v", got[0].d)
	assert.True(t, got[0].d.Degraded)
	assert.True(t, got[0].d.QuotaUnknown, "the quota is unknown")
	for _, g := range got[1:] {
		assert.True(t, g.overBurst, "a cost over the burst: %+v", g.d)
	}
	assert.True(t, got[1].d.QuotaUnknown, "the bucket was not asked: the quota is unknown")
	assert.True(t, got[2].d.QuotaUnknown, "the bucket was not asked: the quota is unknown")
}

func TestCostOverBurstFromAllowKeyAndDeniedHandler(t *testing.T) {
	var seen http.Header
	lim := mustNew(t, 5, time.Minute, addrlimit.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Clone()
		w.WriteHeader(http.StatusTooManyRequests)
	})), addrlimit.WithCost(costFromHeader))
	d := lim.AllowKey(context.Background(), "", "k", 6)
	assert.Equal(t, addrlimit.Limited, d.Outcome)
	assert.ErrorIs(t, d.Err, addrlimit.ErrCostOverBurst)
	assert.Zero(t, d.RetryAfter, "no wait makes a cost over the burst possible")
	serve(lim.Handler(okHandler), req("192.0.2.1:1", "X-Cost", "6"))
	assert.Empty(t, seen.Values("Retry-After"), "a denied handler gets no Retry-After for a cost over the burst")
	assert.Empty(t, seen.Values("RateLimit"), "the bucket was not asked: no quota fields")
}

// TestRateLimitTDescribesTheBucketRetryAfterTheRequest replays requests of
// several costs against x/time/rate: RateLimit's t is the bucket's wait for
// one token (0 while r > 0) whatever the request costs, Retry-After the
// request's wait for its cost.
func TestRateLimitTDescribesTheBucketRetryAfterTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burst, per = 6, time.Minute // one token per 10 s
		lim := mustNew(t, burst, per, addrlimit.WithCost(costFromHeader))
		h := lim.Handler(okHandler)
		ref := rate.NewLimiter(rate.Every(per/burst), burst)
		ceilSec := func(tokens float64) int { // seconds for the reference bucket to gain tokens, rounded up
			return int(math.Ceil(tokens*10 - 1e-6))
		}
		// The two cases of the issue first, then a mixed sequence.
		steps := []struct {
			sleep time.Duration
			cost  int
		}{
			{0, 6}, {0, 3}, // empty bucket, cost 3: t=10, Retry-After 30
			{20 * time.Second, 3}, // 2 left, cost 3: t=0, Retry-After 10
		}
		for i := range 40 {
			steps = append(steps, struct {
				sleep time.Duration
				cost  int
			}{time.Duration(i%7) * 1300 * time.Millisecond, 1 + i*5%burst})
		}
		for i, st := range steps {
			time.Sleep(st.sleep)
			now := time.Now()
			w := serve(h, req("192.0.2.1:1", "X-Cost", strconv.Itoa(st.cost)))
			tokensBefore := ref.TokensAt(now)
			allowed := ref.AllowN(now, st.cost)
			require.Equal(t, allowed, w.Code == 200, "step %d: code %d, x/time/rate allows: %v", i, w.Code, allowed)
			tokens := ref.TokensAt(now)
			r := int(math.Floor(tokens + 1e-9))
			wantT := 0
			if r == 0 {
				wantT = max(ceilSec(1-tokens), 1)
			}
			assert.Equal(t, fmt.Sprintf(`"default";r=%d;t=%d`, r, wantT), w.Header().Get("RateLimit"), "step %d (cost %d)", i, st.cost)
			if !allowed {
				assert.Equal(t, strconv.Itoa(max(ceilSec(float64(st.cost)-tokensBefore), 1)), w.Header().Get("Retry-After"), "step %d (cost %d)", i, st.cost)
			}
		}
		// The two cases the issue names, explicitly.
		lim = mustNew(t, burst, per, addrlimit.WithCost(costFromHeader))
		h = lim.Handler(okHandler)
		serve(h, req("192.0.2.1:1", "X-Cost", "6"))
		w := serve(h, req("192.0.2.1:1", "X-Cost", "3"))
		assert.Equal(t, `"default";r=0;t=10`, w.Header().Get("RateLimit"), "empty bucket: a cost-1 request could go in 10 s")
		assert.Equal(t, "30", w.Header().Get("Retry-After"), "this request needs 3 tokens: 30 s")
		time.Sleep(20 * time.Second)
		w = serve(h, req("192.0.2.1:1", "X-Cost", "3"))
		assert.Equal(t, `"default";r=2;t=0`, w.Header().Get("RateLimit"), "2 tokens left")
		assert.Equal(t, "10", w.Header().Get("Retry-After"), "one more token for this request: 10 s")
	})
}

// A cost over the burst is refused by the policy alone (issue 24, item 5:
// 1,000 such requests at burst 300 cost a Redis store 1,000 Peeks, one per
// refusal, to fill the quota fields). Whatever the failure policy, and
// whether the store answers or not, no request of cost 100,000 at burst 300
// reaches the store: each is answered 413 Content Too Large without
// Retry-After and without quota fields (the bucket was not asked, so its
// quota is unknown: Limit 0), is not Degraded and reports no store error.
func TestCostOverBurstMakesNoStoreCall(t *testing.T) {
	const requests, burst, cost = 1000, 300, 100_000
	for _, policy := range []addrlimit.FailurePolicy{addrlimit.FailLocal, addrlimit.FailOpen, addrlimit.FailClosed} {
		for _, down := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/down=%v", policy, down), func(t *testing.T) {
				st := newFailingStore()
				var got []addrlimit.Decision
				lim := mustNew(t, burst, time.Minute, addrlimit.WithStore(st), addrlimit.WithStoreFailure(policy),
					addrlimit.WithCost(costFromHeader),
					addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { got = append(got, d) }))
				h := lim.Handler(okHandler)
				require.Equal(t, 200, serve(h, req("192.0.2.1:1")).Code, "a request the store charges")
				require.Equal(t, int64(1), st.calls.Load(), "the store counts its calls")
				st.down.Store(down)
				var wrong []string // responses other than a bare 413
				for range requests {
					w := serve(h, req("192.0.2.1:1", "X-Cost", strconv.Itoa(cost)))
					if w.Code != 413 || len(w.Header()["Ratelimit"])+len(w.Header()["Ratelimit-Policy"])+len(w.Header()["Retry-After"]) != 0 ||
						w.Header().Get("Cache-Control") != "no-store" || w.Body.String() != "content too large\n" {
						wrong = append(wrong, fmt.Sprintf("%d %v %q", w.Code, w.Header(), w.Body))
					}
					lim.AllowKey(context.Background(), "", "192.0.2.1", cost) // observed
				}
				assert.Equal(t, int64(1), st.calls.Load(), "store calls after %d refusals of a cost over the burst (burst %d, cost %d)", 2*requests, burst, cost)
				if len(wrong) > 0 {
					t.Errorf("%d of %d responses were not a bare 413 (no quota fields, no Retry-After); the first: %s", len(wrong), requests, wrong[0])
				}
				require.Equal(t, 1+2*requests, len(got), "decisions observed")
				for i, d := range got[1:] {
					if !d.QuotaUnknown || d.Remaining != 0 || d.RetryAfter != 0 || d.Degraded || d.Cost != cost ||
						!errors.Is(d.Err, addrlimit.ErrCostOverBurst) || errors.Is(d.Err, errRefused) {
						t.Fatalf("refusal %d: %+v", i, d)
					}
				}
				s := lim.Stats()
				assert.Zero(t, s.StoreErrors, "no store call, no store error")
				assert.Equal(t, uint64(2*requests), s.KeyErrors)
				assert.Equal(t, uint64(2*requests), s.Limited)
			})
		}
	}
}
