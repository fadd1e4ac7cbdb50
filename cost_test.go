package addrlimit_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

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
		{"11", 429, addrlimit.ErrCostOverBurst, 0},
		{"9223372036854775807", 429, addrlimit.ErrCostOverBurst, 0},
	} {
		t.Run(tc.cost, func(t *testing.T) {
			var got addrlimit.Decision
			lim := mustNew(t, 10, time.Hour, addrlimit.WithCost(costFromHeader),
				addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) { got = d }))
			w := serve(lim.Handler(okHandler), req("192.0.2.1:1", "X-Cost", tc.cost))
			require.Equal(t, tc.code, w.Code)
			require.ErrorIs(t, got.Err, tc.err)
			assert.NotContains(t, w.Body.String(), "cost", "no error text reaches the client")
			if tc.code == 429 {
				assert.Equal(t, "3600", w.Header().Get("Retry-After"), "a cost over the burst waits for a full bucket")
			}
			d := lim.Allow(req("192.0.2.1:1"))
			assert.Equal(t, 10-tc.charged-1, d.Remaining, "charged %d", tc.charged)
		})
	}
}
