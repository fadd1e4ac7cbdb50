package addrlimit_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

func TestAllowKeySharesTheBucketOfTheRequestPath(t *testing.T) {
	lim := mustNew(t, 3, time.Hour)
	ctx := context.Background()
	require.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.1:1")).Outcome)
	// The key the default path computes for 192.0.2.1, given as a string.
	d := lim.AllowKey(ctx, "", addrlimit.AddrKey(netipAddr("192.0.2.1")), 1)
	require.Equal(t, addrlimit.Allowed, d.Outcome)
	assert.Equal(t, 1, d.Remaining, "AllowKey and Handler must charge one bucket")
	require.Equal(t, addrlimit.Allowed, lim.Allow(req("[::ffff:192.0.2.1]:9")).Outcome)
	assert.Equal(t, addrlimit.Limited, lim.AllowKey(ctx, "", "192.0.2.1", 1).Outcome)
	s := lim.Stats()
	assert.Equal(t, 1, s.Keys, "one client, one bucket")
	assert.Equal(t, uint64(3), s.Allowed)
	assert.Equal(t, uint64(1), s.Limited)
}

func TestAllowKeyBadInputNeverSkipsTheLimit(t *testing.T) {
	ctx := context.Background()
	var observed []addrlimit.Decision
	lim := mustNew(t, 2, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "batch", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Hour / 5}}}),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { observed = append(observed, d) }))

	d := lim.AllowKey(ctx, "no-such-policy", "job-1", 1)
	require.ErrorIs(t, d.Err, addrlimit.ErrUnknownPolicy)
	assert.Equal(t, addrlimit.Allowed, d.Outcome)
	assert.Equal(t, "default", d.Policy, "an unknown policy is charged to the default one")
	assert.Equal(t, 1, d.Remaining)

	d = lim.AllowKey(ctx, "batch", "", 1)
	require.ErrorIs(t, d.Err, addrlimit.ErrEmptyKey)
	assert.Equal(t, addrlimit.UnkeyedKey, d.Key)
	assert.Equal(t, "batch", d.Policy)

	for _, n := range []int{0, -1, math.MinInt} {
		d = lim.AllowKey(ctx, "batch", "job-2", n)
		require.ErrorIs(t, d.Err, addrlimit.ErrInvalidCost, "n=%d", n)
		assert.Equal(t, 1, d.Cost, "n=%d is charged as 1, never refunded", n)
	}
	assert.Equal(t, 1, lim.AllowKey(ctx, "batch", "job-2", 1).Remaining, "three charged as 1, one more: 5-4")

	for _, n := range []int{6, math.MaxInt} {
		d = lim.AllowKey(ctx, "batch", "job-3", n)
		require.ErrorIs(t, d.Err, addrlimit.ErrCostOverBurst, "n=%d", n)
		assert.Equal(t, addrlimit.Limited, d.Outcome)
		assert.Zero(t, d.RetryAfter, "no wait makes a cost over the burst possible")
		assert.True(t, d.QuotaUnknown, "a cost over the burst asks no bucket: the quota is unknown")
	}
	p, err := lim.Peek(ctx, "batch", "job-3")
	require.NoError(t, err)
	assert.Equal(t, 5, p.Remaining, "a refused cost charges nothing")

	for _, d := range observed {
		assert.Empty(t, d.Route, "AllowKey decisions name no route")
	}
	assert.Len(t, observed, 8)
	assert.Equal(t, uint64(7), lim.Stats().KeyErrors)
}

func TestPeekAndReset(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store store.Store
	}{
		{"memory", nil},
		{"store", addrlimit.NewTestMemoryStore(100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []addrlimit.Option
			if tc.store != nil {
				opts = append(opts, addrlimit.WithStore(tc.store))
			}
			lim := mustNew(t, 2, time.Hour, opts...)
			d, err := lim.Peek(ctx, "", "192.0.2.1")
			require.NoError(t, err)
			assert.Equal(t, addrlimit.Allowed, d.Outcome)
			assert.Equal(t, 2, d.Remaining)

			for range 3 {
				lim.Allow(req("192.0.2.1:1"))
			}
			for range 3 {
				d, err = lim.Peek(ctx, "", "192.0.2.1")
				require.NoError(t, err)
				assert.Equal(t, addrlimit.Limited, d.Outcome)
				assert.Equal(t, 0, d.Remaining)
				assert.InDelta(t, float64(30*time.Minute), float64(d.RetryAfter), float64(time.Second))
			}
			s := lim.Stats()
			assert.Equal(t, uint64(2), s.Allowed, "Peek is not a decision")
			assert.Equal(t, uint64(1), s.Limited)

			require.NoError(t, lim.Reset(ctx, "", "192.0.2.1"))
			assert.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.1:1")).Outcome, "reset unblocks the client")
			require.NoError(t, lim.Reset(ctx, "", "never-seen"), "resetting a missing key is not an error")

			_, err = lim.Peek(ctx, "nope", "k")
			assert.ErrorIs(t, err, addrlimit.ErrUnknownPolicy)
			assert.ErrorIs(t, lim.Reset(ctx, "nope", "k"), addrlimit.ErrUnknownPolicy)
			_, err = lim.Peek(ctx, "", "")
			assert.ErrorIs(t, err, addrlimit.ErrEmptyKey)
			assert.ErrorIs(t, lim.Reset(ctx, "", ""), addrlimit.ErrEmptyKey)
		})
	}
}

func TestPeekAndResetReportStoreErrors(t *testing.T) {
	ctx := context.Background()
	st := newFailingStore()
	lim := mustNew(t, 1, time.Hour, addrlimit.WithStore(st))
	lim.Allow(req("192.0.2.1:1"))
	st.down.Store(true)
	_, err := lim.Peek(ctx, "", "192.0.2.1")
	require.ErrorIs(t, err, errRefused)
	require.ErrorIs(t, lim.Reset(ctx, "", "192.0.2.1"), errRefused)
	// The local fallback bucket was reset even though the store failed.
	d := lim.Allow(req("192.0.2.1:1"))
	assert.True(t, d.Degraded)
	assert.Equal(t, addrlimit.Allowed, d.Outcome)
}
