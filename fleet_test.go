package addrlimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// fakeLeases is an InFlightStore in memory, on the clock of the test's
// bubble (testing/synctest): leases lapse LeaseTime after they were taken
// or renewed. Its rate buckets are failingStore's.
type fakeLeases struct {
	*failingStore
	leaseTime time.Duration

	mu          sync.Mutex
	leases      map[string]fakeLease // by ID
	renews      [][]string           // the IDs of each Renew call
	renewedAt   []time.Time
	releases    map[string]int // Release calls per ID
	acquireErr  error
	renewErr    error
	failRelease int // the next calls to Release that fail
}

type fakeLease struct {
	policy, key string
	expires     time.Time
}

func newFakeLeases(leaseTime time.Duration) *fakeLeases {
	return &fakeLeases{failingStore: newFailingStore(), leaseTime: leaseTime, leases: map[string]fakeLease{}, releases: map[string]int{}}
}

func (s *fakeLeases) LeaseTime() time.Duration { return s.leaseTime }

// heldLocked counts the unexpired leases of (policy, key).
func (s *fakeLeases) heldLocked(policy, key string) int {
	n := 0
	for _, l := range s.leases {
		if l.policy == policy && l.key == key && time.Now().Before(l.expires) {
			n++
		}
	}
	return n
}

func (s *fakeLeases) held(policy, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked(policy, key)
}

func (s *fakeLeases) Acquire(_ context.Context, l store.Lease, limit int) (int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acquireErr != nil {
		return 0, false, s.acquireErr
	}
	n := s.heldLocked(l.Policy, l.Key)
	if n >= limit {
		return n, false, nil
	}
	s.leases[l.ID] = fakeLease{policy: l.Policy, key: l.Key, expires: time.Now().Add(s.leaseTime)}
	return n + 1, true, nil
}

func (s *fakeLeases) Renew(_ context.Context, ls []store.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.ID)
	}
	s.renews = append(s.renews, ids)
	s.renewedAt = append(s.renewedAt, time.Now())
	if s.renewErr != nil {
		return s.renewErr
	}
	for _, l := range ls {
		if cur, ok := s.leases[l.ID]; ok && time.Now().Before(cur.expires) {
			cur.expires = time.Now().Add(s.leaseTime)
			s.leases[l.ID] = cur
		}
	}
	return nil
}

func (s *fakeLeases) Release(_ context.Context, l store.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[l.ID]++
	if s.failRelease > 0 {
		s.failRelease--
		return errRefused
	}
	delete(s.leases, l.ID)
	return nil
}

func (s *fakeLeases) set(f func(s *fakeLeases)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

const leaseTime = 30 * time.Second

// TestFleetInFlightSharedByInstances: two Limiters on one fleet store share
// the limit of 2 exactly; each lease is released once, in the store.
func TestFleetInFlightSharedByInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeLeases(leaseTime)
		a := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2), addrlimit.WithStore(fs))
		b := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2), addrlimit.WithStore(fs))
		d1 := a.Allow(req("192.0.2.1:1"))
		d2 := b.Allow(req("192.0.2.1:1"))
		d3 := a.Allow(req("192.0.2.1:1"))
		require.True(t, d1.HoldsSlot())
		require.Equal(t, 2, d2.InFlight)
		require.True(t, d3.InFlightLimited, "the fleet holds 2")
		require.False(t, d3.Degraded)
		require.Equal(t, 2, fs.held("default", "192.0.2.1"))
		a.Release(t.Context(), d1)
		a.Release(t.Context(), d1)
		require.Equal(t, 1, fs.held("default", "192.0.2.1"))
		d4 := b.Allow(req("192.0.2.1:1"))
		require.True(t, d4.HoldsSlot())
		b.Release(t.Context(), d2)
		b.Release(t.Context(), d4)
		fs.set(func(s *fakeLeases) {
			for id, n := range s.releases {
				require.Equal(t, 1, n, "lease %s released %d times", id, n)
			}
		})
		require.Equal(t, 0, a.Stats().Policies[0].InFlight, "every lease released")
	}) // the renewing goroutines exit once nothing is held: synctest.Test waits for them
}

// TestFleetInFlightStatsCountLeases: the slots a Limiter holds as leases in
// a fleet store are its Stats' InFlight and InFlightKeys (and so the
// collectors' addrlimit_in_flight), per policy, until released.
func TestFleetInFlightStatsCountLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeLeases(leaseTime)
		lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2), addrlimit.WithStore(fs))
		inFlight := func() (int, int) {
			p := lim.Stats().Policies[0]
			return p.InFlight, p.InFlightKeys
		}
		var ds []addrlimit.Decision
		for _, remote := range []string{"192.0.2.1:1", "192.0.2.1:2", "192.0.2.2:1"} {
			d := lim.Allow(req(remote))
			require.True(t, d.HoldsSlot(), remote)
			ds = append(ds, d)
		}
		held, keys := inFlight()
		require.Equal(t, [2]int{3, 2}, [2]int{held, keys}, "3 leases of 2 keys held")
		lim.Release(t.Context(), ds[0])
		lim.Release(t.Context(), ds[0])
		held, keys = inFlight()
		require.Equal(t, [2]int{2, 2}, [2]int{held, keys}, "one released (twice)")
		lim.Release(t.Context(), ds[1])
		lim.Release(t.Context(), ds[2])
		held, keys = inFlight()
		require.Equal(t, [2]int{0, 0}, [2]int{held, keys}, "all released")
	})
}

// TestFleetInFlightRenewsInOneCall: three held leases are renewed together,
// in one Renew call every LeaseTime/3, so they outlive LeaseTime; renewal
// stops when they are released, and the goroutine exits.
func TestFleetInFlightRenewsInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeLeases(leaseTime)
		lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(3), addrlimit.WithStore(fs))
		start := time.Now()
		var ds []addrlimit.Decision
		for i := range 3 {
			ds = append(ds, lim.Allow(req("192.0.2.1:1")))
			require.True(t, ds[i].HoldsSlot())
		}
		time.Sleep(5 * leaseTime)
		synctest.Wait()
		require.Equal(t, 3, fs.held("default", "192.0.2.1"), "renewed past LeaseTime")
		fs.set(func(s *fakeLeases) {
			require.Len(t, s.renews, 15, "every LeaseTime/3 for 5 LeaseTimes")
			for i, ids := range s.renews {
				require.Len(t, ids, 3, "renewal %d: all leases in one call", i)
				require.Equal(t, time.Duration(i+1)*leaseTime/3, s.renewedAt[i].Sub(start))
			}
		})
		for _, d := range ds {
			lim.Release(t.Context(), d)
		}
		time.Sleep(leaseTime)
		synctest.Wait()
		fs.set(func(s *fakeLeases) { require.Len(t, s.renews, 15, "no renewal once released") })
		require.Equal(t, 0, fs.held("default", "192.0.2.1"))
	})
}

// TestFleetInFlightRenewFailureLapses: while Renew fails, the leases lapse
// in the store after LeaseTime (they are never held longer), the Limiter
// keeps trying, and a release then frees nothing else.
func TestFleetInFlightRenewFailureLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeLeases(leaseTime)
		lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithStore(fs))
		d := lim.Allow(req("192.0.2.1:1"))
		require.True(t, d.HoldsSlot())
		fs.set(func(s *fakeLeases) { s.renewErr = errRefused })
		time.Sleep(leaseTime + time.Second)
		synctest.Wait()
		require.Equal(t, 0, fs.held("default", "192.0.2.1"), "lapsed")
		other := lim.Allow(req("192.0.2.1:1"))
		require.True(t, other.HoldsSlot(), "the lapsed slot is free for another request")
		fs.set(func(s *fakeLeases) { s.renewErr = nil })
		lim.Release(t.Context(), d) // the lapsed lease: frees nothing else
		require.Equal(t, 1, fs.held("default", "192.0.2.1"))
		lim.Release(t.Context(), other)
		require.Equal(t, 0, fs.held("default", "192.0.2.1"))
	})
}

// TestFleetInFlightReleaseRetried: a Release that fails is retried at the
// next renewal ticks, 3 calls in all, and the lease is not renewed
// meanwhile; after the last failure it lapses within LeaseTime.
func TestFleetInFlightReleaseRetried(t *testing.T) {
	for _, tc := range []struct {
		fail, calls int
	}{{1, 2}, {2, 3}, {5, 3}} {
		synctest.Test(t, func(t *testing.T) {
			fs := newFakeLeases(leaseTime)
			lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithStore(fs))
			d := lim.Allow(req("192.0.2.1:1"))
			fs.set(func(s *fakeLeases) { s.failRelease = tc.fail })
			lim.Release(t.Context(), d)
			require.Equal(t, uint64(1), lim.Stats().StoreErrors)
			time.Sleep(leaseTime)
			synctest.Wait()
			fs.set(func(s *fakeLeases) {
				for _, n := range s.releases {
					require.Equal(t, tc.calls, n, "Release calls when %d fail", tc.fail)
				}
				require.Empty(t, s.renews, "a released lease is never renewed")
			})
			require.Equal(t, 0, fs.held("default", "192.0.2.1"))
		})
	}
}

// inFlightFailureCases are what each failure policy makes of three
// requests of one client, under an in-flight limit of 2, when the fleet
// store fails to take a slot: the statuses, and the slots then held.
var inFlightFailureCases = []struct {
	policy  addrlimit.FailurePolicy
	codes   []int
	holding int
}{
	{addrlimit.FailLocal, []int{200, 200, 429}, 2},
	{addrlimit.FailOpen, []int{200, 200, 200}, 0},
	{addrlimit.FailClosed, []int{503, 503, 503}, 0},
}

// TestFleetInFlightFailurePolicies: when Acquire fails, FailLocal limits
// with a local table of the same size, FailOpen lets the request run
// holding nothing, FailClosed refuses it (503); each refusal gives the
// rate tokens back.
func TestFleetInFlightFailurePolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range inFlightFailureCases {
			fs := newFakeLeases(leaseTime)
			fs.set(func(s *fakeLeases) { s.acquireErr = errors.New("redis: connection pool timeout") })
			lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2), addrlimit.WithStore(fs), addrlimit.WithStoreFailure(tc.policy))
			var got []int
			held := make(chan struct{})
			var wg sync.WaitGroup
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-held }))
			for range 3 {
				rec := make(chan int)
				wg.Go(func() { rec <- serve(h, req("192.0.2.1:1")).Code })
				synctest.Wait()
				select {
				case c := <-rec:
					got = append(got, c)
				default:
					got = append(got, 200) // still running
					wg.Go(func() { <-rec })
				}
			}
			require.Equal(t, tc.codes, got, tc.policy.String())
			require.Equal(t, tc.holding, lim.Stats().Policies[0].InFlight, tc.policy.String())
			close(held)
			wg.Wait()
			require.Equal(t, 0, lim.Stats().Policies[0].InFlight)
			d, err := lim.Peek(t.Context(), "", "192.0.2.1")
			require.NoError(t, err)
			served := 0
			for _, c := range tc.codes {
				if c == 200 {
					served++
				}
			}
			require.Equal(t, 300-served, d.Remaining, "%v: only served requests are charged", tc.policy)
		}
	})
}

// TestNewRefusesANonPositiveLeaseTime: the store's LeaseTime is read by New.
func TestNewRefusesANonPositiveLeaseTime(t *testing.T) {
	_, err := addrlimit.New(1, time.Second, addrlimit.WithInFlight(1), addrlimit.WithStore(newFakeLeases(0)))
	requirePackageError(t, err, "the store's LeaseTime must be positive, got 0s")
	// Also without an in-flight limit yet: SetPolicies may add one later.
	_, err = addrlimit.New(1, time.Second, addrlimit.WithStore(newFakeLeases(0)))
	requirePackageError(t, err, "the store's LeaseTime must be positive, got 0s")
}

// TestFleetInFlightWait: on a fleet store, a waiting request takes the
// slot this instance releases, and retries once at its timeout (another
// instance's release).
func TestFleetInFlightWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeLeases(leaseTime)
		a := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithStore(fs), addrlimit.WithInFlightWait(2, 5*time.Second))
		b := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithStore(fs))
		first := a.Allow(req("192.0.2.1:1"))
		got := make(chan addrlimit.Decision)
		start := time.Now()
		go func() { got <- a.Allow(req("192.0.2.1:1")) }()
		time.Sleep(time.Second)
		a.Release(t.Context(), first)
		second := <-got
		require.True(t, second.HoldsSlot())
		require.Equal(t, time.Second, time.Since(start))
		a.Release(t.Context(), second)

		other := b.Allow(req("192.0.2.1:1"))
		start = time.Now()
		go func() { got <- a.Allow(req("192.0.2.1:1")) }()
		time.Sleep(time.Second)
		b.Release(t.Context(), other)
		third := <-got
		require.True(t, third.HoldsSlot(), "the try at the timeout")
		require.Equal(t, 5*time.Second, time.Since(start))
		a.Release(t.Context(), third)
		require.Equal(t, 0, fs.held("default", "192.0.2.1"))
	})
}
