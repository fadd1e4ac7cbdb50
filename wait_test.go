package addrlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// waiting is the requests of the default policy waiting for a slot.
func waiting(l *addrlimit.Limiter) int { return l.Stats().Policies[0].InFlightWaiting }

// TestInFlightWait: with one slot and a queue of one, a second request
// waits (holding no slot, counted) and gets the slot its predecessor
// releases; a third, over the queue, is refused at once.
func TestInFlightWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithInFlightWait(1, 5*time.Second))
		a := lim.Allow(req("192.0.2.1:1"))
		require.True(t, a.HoldsSlot())
		got := make(chan addrlimit.Decision)
		start := time.Now()
		go func() { got <- lim.Allow(req("192.0.2.1:1")) }()
		synctest.Wait()
		require.Equal(t, 1, waiting(lim))
		require.Equal(t, 1, inFlightHeld(lim, "default"), "a waiting request holds no slot")
		c := lim.Allow(req("192.0.2.1:1"))
		require.True(t, c.InFlightLimited, "over the queue: refused at once")
		require.Zero(t, time.Since(start))
		time.Sleep(2 * time.Second)
		lim.Release(t.Context(), a)
		b := <-got
		require.True(t, b.HoldsSlot())
		require.Equal(t, 2*time.Second, time.Since(start), "it waited for the release")
		require.Equal(t, 0, waiting(lim))
		lim.Release(t.Context(), b)
		require.Equal(t, 0, inFlightHeld(lim, "default"))
	})
}

// TestInFlightWaitEnds: a wait ends in a refusal at its timeout, or as
// soon as the request's context ends; either way the request holds
// nothing and is charged nothing.
func TestInFlightWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustNew(t, 300, time.Hour, addrlimit.WithInFlight(1), addrlimit.WithInFlightWait(4, 5*time.Second)) // a token every 12 s
		a := lim.Allow(req("192.0.2.1:1"))
		start := time.Now()
		d := lim.Allow(req("192.0.2.1:1"))
		require.True(t, d.InFlightLimited)
		require.Equal(t, 5*time.Second, time.Since(start), "the timeout")
		require.Equal(t, 299, d.Remaining, "its token given back")

		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan addrlimit.Decision)
		start = time.Now()
		go func() { got <- lim.Allow(req("192.0.2.1:1").WithContext(ctx)) }()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, waiting(lim))
		cancel()
		d = <-got
		require.True(t, d.InFlightLimited)
		require.Equal(t, time.Second, time.Since(start), "the client went away")
		require.Equal(t, 0, waiting(lim))
		lim.Release(t.Context(), a)
		require.Equal(t, 0, inFlightHeld(lim, "default"))
		p, err := lim.Peek(t.Context(), "", "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, 299, p.Remaining, "only the served request is charged")
	})
}

func TestWithInFlightWaitValidates(t *testing.T) {
	_, err := addrlimit.New(1, time.Second, addrlimit.WithInFlightWait(0, time.Second))
	requirePackageError(t, err, "WithInFlightWait needs a queue of at least 1 and a positive timeout, got 0 and 1s")
}
