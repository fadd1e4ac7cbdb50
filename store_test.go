package addrlimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
	"github.com/addrlimit/addrlimit/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:    func(t *testing.T) store.Store { return addrlimit.NewTestMemoryStore(1000) },
		Bubble: true,
	})
}

// A store behind a Limiter under FailOpen and FailClosed passes the suite:
// the failure policy changes nothing while the store answers.
// (storetest.Run itself runs every store behind FailLocal.)
func TestFailoverConformance(t *testing.T) {
	for _, p := range []addrlimit.FailurePolicy{addrlimit.FailOpen, addrlimit.FailClosed} {
		t.Run(p.String(), func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New:     func(t *testing.T) store.Store { return addrlimit.NewTestMemoryStore(1000) },
				Bubble:  true,
				Failure: p,
			})
		})
	}
}

// boundedStore refuses policies whose burst × interval exceeds max, as a
// remote store with bounded arithmetic does.
type boundedStore struct {
	store.Store
	max     time.Duration
	checked []addrlimit.Policy
}

func (s *boundedStore) CheckPolicy(p addrlimit.Policy) error {
	s.checked = append(s.checked, p)
	if time.Duration(p.Limits[0].Burst)*p.Limits[0].Interval > s.max {
		return fmt.Errorf("boundedstore: burst × interval must be at most %v", s.max)
	}
	return nil
}

// New asks a store that implements PolicyChecker about every policy, and
// refuses the Limiter, naming the policy and the store's bound, when the
// store cannot represent one; a store without the method is not asked.
func TestNewRefusesPoliciesTheStoreCannotRepresent(t *testing.T) {
	s := &boundedStore{Store: addrlimit.NewTestMemoryStore(10), max: time.Hour}
	_, err := addrlimit.New(10, time.Minute, addrlimit.WithStore(s),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "long", Limits: []addrlimit.Limit{{Burst: 100, Interval: 2 * time.Hour / 100}}}))
	if err == nil || !strings.Contains(err.Error(), `policy "long"`) || !strings.Contains(err.Error(), "at most 1h0m0s") {
		t.Fatalf("New with a policy past the store's bound: %v, want an error naming the policy and the bound", err)
	}
	s.checked = nil
	lim, err := addrlimit.New(10, time.Minute, addrlimit.WithStore(s), addrlimit.WithPolicy(addrlimit.Policy{Name: "short", Limits: []addrlimit.Limit{{Burst: 100, Interval: 30 * time.Minute / 100}}}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(s.checked), fmt.Sprint(lim.Policies()); got != want {
		t.Fatalf("policies checked: %s, want every policy %s", got, want)
	}
}

// cancelSensitiveStore fails every call whose context is done, as a remote
// store does.
type cancelSensitiveStore struct{ store.Store }

func (s cancelSensitiveStore) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	if err := ctx.Err(); err != nil {
		return store.Result{}, err
	}
	return s.Store.Take(ctx, key, p, n)
}

// A decision never depends on the caller hanging up: the Limiter asks the
// store with a context that is not cancelled, so under FailOpen a cancelled
// caller gets the budget and no store error is counted.
func TestCancelledCallerIsDecidedByTheStore(t *testing.T) {
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithStoreFailure(addrlimit.FailOpen),
		addrlimit.WithStore(cancelSensitiveStore{addrlimit.NewTestMemoryStore(10)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	allowed := 0
	for range 20 {
		if d := lim.AllowKey(ctx, "", "k", 1); d.Outcome == addrlimit.Allowed {
			allowed++
		}
	}
	if n := lim.Stats().StoreErrors; allowed != 3 || n != 0 {
		t.Fatalf("%d of 20 cancelled calls allowed, budget 3; StoreErrors %d, want 0", allowed, n)
	}
}

type ctxProbeKey struct{}

// ctxProbeStore records what the context of each Take carries.
type ctxProbeStore struct {
	store.Store
	value       any
	hasDeadline bool
}

func (s *ctxProbeStore) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	s.value = ctx.Value(ctxProbeKey{})
	_, s.hasDeadline = ctx.Deadline()
	return s.Store.Take(ctx, key, p, n)
}

// AllowKey passes ctx's values to the Store, but not its deadline: the
// store's own timeout bounds the call.
func TestAllowKeyPassesValuesButNotTheDeadline(t *testing.T) {
	s := &ctxProbeStore{Store: addrlimit.NewTestMemoryStore(10)}
	lim := mustNew(t, 3, time.Hour, addrlimit.WithStore(s))
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), ctxProbeKey{}, "trace-7"), time.Unix(1, 0))
	defer cancel()
	if d := lim.AllowKey(ctx, "", "k", 1); d.Outcome != addrlimit.Allowed || d.Err != nil {
		t.Fatalf("decision %+v, want allowed without an error", d)
	}
	if s.value != "trace-7" || s.hasDeadline {
		t.Fatalf("the store saw value %v and a deadline %v, want trace-7 and none", s.value, s.hasDeadline)
	}
}
