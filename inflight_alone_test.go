package addrlimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// exportAlone is a policy with an in-flight limit and no rate limit.
var exportAlone = addrlimit.Policy{Name: "export", InFlight: 2}

// exportSelector routes /export to the policy "export".
func exportSelector(r *http.Request) (string, string, error) {
	if r.URL.Path == "/export" {
		return "export", "", nil
	}
	return "", "", nil
}

// exportReq is a request for /export from remote.
func exportReq(remote string, fields ...string) *http.Request {
	r := req(remote, fields...)
	r.URL.Path = "/export"
	return r
}

// requireNoQuotaFields fails unless h holds no quota field of either style.
func requireNoQuotaFields(t testing.TB, h http.Header) {
	t.Helper()
	for _, f := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		require.Empty(t, h.Values(f), f)
	}
}

// TestInFlightAloneHTTP: /export under a policy of 2 in flight per client
// and no rate limit: two requests run, the third is refused with 429,
// Retry-After: 1 and no quota field; an exempt request holds no slot;
// after a release the next request runs; no response carries quota fields,
// and no Store call is made.
func TestInFlightAloneHTTP(t *testing.T) {
	for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderXRateLimit} {
		t.Run(style.String(), func(t *testing.T) {
			st := newFailingStore()
			tok := mustToken(t, secret)
			lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone),
				addrlimit.WithPolicySelector(exportSelector), addrlimit.WithHeaders(style),
				addrlimit.WithInternalToken(tok), addrlimit.WithStore(st))
			release := make(chan struct{})
			started := make(chan struct{}, 4)
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				<-release
			}))
			var wg sync.WaitGroup
			var mu sync.Mutex
			var first []*httptest.ResponseRecorder
			for range 2 {
				wg.Go(func() {
					w := serve(h, exportReq("192.0.2.1:1"))
					mu.Lock()
					first = append(first, w)
					mu.Unlock()
				})
				<-started
			}
			require.Equal(t, 2, inFlightHeld(lim, "export"))

			w := serve(h, exportReq("192.0.2.1:2"))
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			require.Equal(t, "1", w.Header().Get("Retry-After"))
			require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
			requireNoQuotaFields(t, w.Header())

			// The internal token: exempt, holds no slot, though both are held.
			wg.Go(func() {
				require.Equal(t, http.StatusOK, serve(h, exportReq("192.0.2.1:3", "Authorization", "Bearer "+secret)).Code)
			})
			<-started
			require.Equal(t, 2, inFlightHeld(lim, "export"))

			close(release)
			wg.Wait()
			require.Len(t, first, 2)
			for _, w := range first {
				require.Equal(t, http.StatusOK, w.Code)
				requireNoQuotaFields(t, w.Header())
			}
			require.Equal(t, 0, inFlightHeld(lim, "export"))
			w = serve(lim.Handler(okHandler), exportReq("192.0.2.1:4"))
			require.Equal(t, http.StatusOK, w.Code)
			requireNoQuotaFields(t, w.Header())
			require.Equal(t, int64(0), st.calls.Load(), "Store calls for a policy without rate limits")

			ps := lim.Stats().Policies[1]
			require.Equal(t, "export", ps.Name)
			require.Equal(t, uint64(3), ps.Allowed)
			require.Equal(t, uint64(1), ps.Limited)
			require.Equal(t, uint64(1), ps.InFlightLimited)
			require.Empty(t, ps.Limits)
			require.Equal(t, 0, ps.Keys)
		})
	}
}

// TestInFlightAlonePublicMethods drives every public method of a Limiter
// with a policy that has an in-flight limit and no rate limit: nothing
// panics, nothing reports a quota, and the slots are counted.
func TestInFlightAlonePublicMethods(t *testing.T) {
	ctx := t.Context()
	lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone), addrlimit.WithPolicySelector(exportSelector))

	// Handler.
	require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), exportReq("192.0.2.1:1")).Code)

	// Allow, Decide, AllowKey: one slot each; the third of a key is refused.
	a := lim.Allow(exportReq("192.0.2.1:1"))
	require.Equal(t, addrlimit.Allowed, a.Outcome)
	require.True(t, a.HoldsSlot())
	require.False(t, a.QuotaUnknown, "no store failed")
	require.Equal(t, addrlimit.Limit{}, a.Limit())
	for range a.Limits() {
		t.Fatal("Limits yields a limit of a policy without rate limits")
	}
	b := lim.Decide(ctx, addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.1"), Policy: "export", Cost: 5})
	require.Equal(t, addrlimit.Allowed, b.Outcome, "a cost means nothing without a rate limit")
	require.Equal(t, 2, b.InFlight)
	c := lim.AllowKey(ctx, "export", "192.0.2.1", 1)
	require.True(t, c.Denied())
	require.True(t, c.InFlightLimited)
	require.False(t, c.HoldsSlot())
	require.Equal(t, time.Second, c.RetryAfter)
	noSlot := lim.Decide(ctx, addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.1"), Policy: "export", NoSlot: true})
	require.Equal(t, addrlimit.Allowed, noSlot.Outcome)
	require.False(t, noSlot.HoldsSlot())
	require.Equal(t, 2, inFlightHeld(lim, "export"))

	// Respond and QuotaFields: no quota fields; the refusal is 429, Retry-After: 1.
	w := httptest.NewRecorder()
	require.False(t, lim.Respond(w, exportReq("192.0.2.1:1"), a))
	requireNoQuotaFields(t, w.Header())
	w = httptest.NewRecorder()
	require.True(t, lim.Respond(w, exportReq("192.0.2.1:1"), c))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	requireNoQuotaFields(t, w.Header())
	for _, d := range []addrlimit.Decision{a, c} {
		lim.QuotaFields(d, func(name, value string) { t.Errorf("QuotaFields sets %s: %s", name, value) })
	}

	// Peek and Reset: no buckets, an error naming the policy.
	_, err := lim.Peek(ctx, "export", "192.0.2.1")
	requirePackageError(t, err, `policy "export" has no rate limit: no buckets`)
	err = lim.Reset(ctx, "export", "192.0.2.1")
	requirePackageError(t, err, `policy "export" has no rate limit: no buckets`)

	// Refund: nothing to give back.
	lim.Refund(ctx, a)
	lim.Refund(ctx, b)
	require.Equal(t, uint64(0), lim.Stats().Refunded)

	// Release: each slot once.
	lim.Release(ctx, a)
	lim.Release(ctx, a)
	lim.Release(ctx, c)
	require.Equal(t, 1, inFlightHeld(lim, "export"))

	// Stats and Policies.
	ps := lim.Stats().Policies[1]
	require.Equal(t, addrlimit.PolicyStats{Name: "export", Allowed: 4, Limited: 1, InFlightLimited: 1, InFlight: 1, InFlightKeys: 1, Limits: []addrlimit.LimitStats{}}, ps)
	pols := lim.Policies()
	require.Equal(t, addrlimit.Policy{Name: "export", Limits: []addrlimit.Limit{}, InFlight: 2}, pols[1])

	// SetPolicies: to rate and in-flight, and back; the slot held goes on.
	rated := addrlimit.Policy{Name: "export", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Minute}}, InFlight: 1}
	require.NoError(t, lim.SetPolicies(pols[0], rated))
	d := lim.AllowKey(ctx, "export", "192.0.2.1", 1)
	require.True(t, d.InFlightLimited, "b's slot is still held, the limit is now 1")
	p, err := lim.Peek(ctx, "export", "192.0.2.1")
	require.NoError(t, err)
	require.Equal(t, 3, p.Remaining, "new buckets start full; the refused request is charged nothing")
	w = serve(lim.Handler(okHandler), exportReq("192.0.2.2:1"))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, `"export";r=2;t=0`, w.Header().Get("RateLimit"))

	require.NoError(t, lim.SetPolicies(pols[0], addrlimit.Policy{Name: "export", InFlight: 1}))
	d = lim.AllowKey(ctx, "export", "192.0.2.1", 1)
	require.True(t, d.InFlightLimited, "b's slot is still held")
	require.Equal(t, addrlimit.Limit{}, d.Limit())
	lim.Release(ctx, b)
	d = lim.AllowKey(ctx, "export", "192.0.2.1", 1)
	require.Equal(t, addrlimit.Allowed, d.Outcome)
	lim.Release(ctx, d)
	require.NoError(t, lim.SetPolicies(pols[0], addrlimit.Policy{Name: "export", InFlight: 3}))
	require.Equal(t, 0, inFlightHeld(lim, "export"))
	require.Empty(t, lim.Stats().Policies[1].Limits)

	// Dry run: served, holding nothing, counted as refused.
	dry := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{Name: "export", InFlight: 1}), addrlimit.WithDryRun())
	e := dry.AllowKey(ctx, "export", "k", 1)
	f := dry.AllowKey(ctx, "export", "k", 1)
	require.False(t, f.Denied())
	require.True(t, f.DryRun && f.InFlightLimited)
	dry.Release(ctx, e)
	require.Equal(t, 0, inFlightHeld(dry, "export"))
}

// TestInFlightAloneValidates: a policy needs a rate limit or an in-flight
// limit; the default policy needs a rate limit.
func TestInFlightAloneValidates(t *testing.T) {
	require.NoError(t, exportAlone.Validate())
	requirePackageError(t, addrlimit.Policy{Name: "export"}.Validate(),
		`policy "export": has no limit: give it 1 to 4 rate limits, an in-flight limit (InFlight), or both`)
	_, err := addrlimit.New(1, time.Second, addrlimit.WithPolicy(addrlimit.Policy{Name: "export"}))
	requirePackageError(t, err, `policy "export": has no limit`)
	lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone))
	err = lim.SetPolicies(addrlimit.Policy{Name: "default", InFlight: 2})
	requirePackageError(t, err, `the default policy "default" needs a rate limit`)
	require.Equal(t, 300, lim.Policies()[0].Limits[0].Burst, "nothing changed")
}

// TestInFlightAloneFailurePolicies: when a fleet store fails to take a
// slot of a policy without rate limits, the failure policy decides as for
// any in-flight limit: FailLocal limits with the local table (429, the
// third refused), FailOpen lets every request run holding nothing,
// FailClosed refuses with 503. No rate call reaches the store.
func TestInFlightAloneFailurePolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range inFlightFailureCases {
			fs := newFakeLeases(leaseTime)
			fs.set(func(s *fakeLeases) { s.acquireErr = errors.New("redis: connection pool timeout") })
			lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone), addrlimit.WithStore(fs), addrlimit.WithStoreFailure(tc.policy))
			var got []int
			var ds []addrlimit.Decision
			for range 3 {
				d := lim.AllowKey(t.Context(), "export", "192.0.2.1", 1)
				w := httptest.NewRecorder()
				lim.Respond(w, exportReq("192.0.2.1:1"), d)
				requireNoQuotaFields(t, w.Header())
				got = append(got, w.Code)
				ds = append(ds, d)
			}
			require.Equal(t, tc.codes, got, tc.policy.String())
			require.Equal(t, tc.holding, inFlightHeld(lim, "export"), tc.policy.String())
			for _, d := range ds {
				require.True(t, d.Degraded, tc.policy.String())
				lim.Release(t.Context(), d)
			}
			require.Equal(t, 0, inFlightHeld(lim, "export"))
			require.Equal(t, int64(0), fs.calls.Load(), "%v: rate calls to the store", tc.policy)
		}
	})
}

// TestInFlightAloneWithRefund: WithRefund has nothing to give back to a
// policy without rate limits: its responses are served (no panic after the
// handler), and Refunded stays 0.
func TestInFlightAloneWithRefund(t *testing.T) {
	lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone), addrlimit.WithPolicySelector(exportSelector),
		addrlimit.WithRefund(func(status int) bool { return status >= 500 }))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	for range 3 {
		require.Equal(t, http.StatusBadGateway, serve(h, exportReq("192.0.2.1:1")).Code)
	}
	require.Equal(t, uint64(0), lim.Stats().Refunded)
	require.Equal(t, 0, inFlightHeld(lim, "export"))
	require.Equal(t, http.StatusBadGateway, serve(h, req("192.0.2.1:1")).Code)
	require.Equal(t, uint64(1), lim.Stats().Refunded, "the default policy's token is given back")
}

// TestInFlightAloneSetPoliciesUnderTraffic: while 8 goroutines take and
// release slots of "export", SetPolicies switches it 200 times between
// rate and in-flight limits and an in-flight limit alone: nothing panics,
// no decision holds more than the limit's slots of the key (2 under
// either), and none is held at the end.
func TestInFlightAloneSetPoliciesUnderTraffic(t *testing.T) {
	lim := mustNew(t, 300, time.Minute, addrlimit.WithPolicy(exportAlone))
	def := lim.Policies()[0]
	rated := addrlimit.Policy{Name: "export", Limits: []addrlimit.Limit{{Burst: 1000, Interval: time.Millisecond}}, InFlight: 2}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	holding, most := 0, 0
	var decisions atomic.Uint64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := lim.AllowKey(t.Context(), "export", "k", 1)
				decisions.Add(1)
				if d.HoldsSlot() {
					mu.Lock()
					holding++
					most = max(most, holding)
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					holding--
					mu.Unlock()
				}
				lim.Release(t.Context(), d)
			}
		})
	}
	for i := range 200 {
		p := exportAlone
		if i%2 == 0 {
			p = rated
		}
		require.NoError(t, lim.SetPolicies(def, p))
	}
	close(stop)
	wg.Wait()
	st := lim.Stats().Policies[1]
	t.Logf("%d allowed, %d refused by the in-flight limit, at most %d held at once", st.Allowed, st.InFlightLimited, most)
	require.LessOrEqual(t, most, 2)
	require.Equal(t, 0, inFlightHeld(lim, "export"))
	require.LessOrEqual(t, st.Allowed+st.Limited, decisions.Load(), "Stats counts no decision that was not made (nor below zero)")
	require.LessOrEqual(t, st.InFlightLimited, st.Limited)
}
