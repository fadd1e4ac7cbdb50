package storetest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// throughLimiter calls a store as production does: each call goes through
// a Limiter built WithStore(s), one Limiter per policy the suite names,
// which holds that policy: Take is AllowKey, Refund is Limiter.Refund of
// an allowed decision of that cost (answered by the Peek after it), Peek
// and Reset are the Limiter's. A call the failure policy decided reports
// the store's error, so the suite sees every failure.
type throughLimiter struct {
	*testing.T
	s       store.Store
	failure addrlimit.FailurePolicy

	mu   sync.Mutex
	lims map[string]*addrlimit.Limiter // by the policy's identity
}

// keyAsIs keys requests by a header, so that the Limiter takes the suite's
// keys as they are (under an address KeyFunc, Peek and Reset would read a
// key written as an address as that client's /64).
func keyAsIs(r *http.Request) (string, error) { return r.Header.Get("Key"), nil }

// limiter returns the Limiter of p, building it on first use.
func (tl *throughLimiter) limiter(p store.Policy) (*addrlimit.Limiter, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	id := fmt.Sprint(p.Name, p.Limits)
	if lim := tl.lims[id]; lim != nil {
		return lim, nil
	}
	lim, err := addrlimit.New(1, time.Hour,
		addrlimit.WithName("storetest-unused"),
		addrlimit.WithPolicy(p),
		addrlimit.WithStore(tl.s),
		addrlimit.WithStoreFailure(tl.failure),
		addrlimit.WithKeyFunc(keyAsIs),
		addrlimit.WithMaxKeys(1000))
	if err != nil {
		return nil, err
	}
	tl.lims[id] = lim
	return lim, nil
}

// result is the Result that d reports.
func result(d addrlimit.Decision) store.Result {
	res := store.Result{Allowed: d.Outcome == addrlimit.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	i := 0
	for ls := range d.Limits() {
		res.Resets[i] = ls.ResetAfter
		i++
	}
	return res
}

func (tl *throughLimiter) Take(ctx context.Context, key string, p store.Policy, n int) (store.Result, error) {
	lim, err := tl.limiter(p)
	if err != nil {
		return store.Result{}, err
	}
	d := lim.AllowKey(ctx, p.Name, key, n)
	if d.Err != nil {
		return store.Result{}, d.Err
	}
	return result(d), nil
}

func (tl *throughLimiter) Refund(ctx context.Context, key string, p store.Policy, n int) (store.Result, error) {
	lim, err := tl.limiter(p)
	if err != nil {
		return store.Result{}, err
	}
	before := lim.Stats().StoreErrors
	lim.Refund(ctx, addrlimit.Decision{Outcome: addrlimit.Allowed, Policy: p.Name, Key: key, Cost: n})
	if lim.Stats().StoreErrors != before {
		return store.Result{}, fmt.Errorf("storetest: the store failed a refund")
	}
	return tl.Peek(ctx, key, p)
}

func (tl *throughLimiter) Peek(ctx context.Context, key string, p store.Policy) (store.Result, error) {
	lim, err := tl.limiter(p)
	if err != nil {
		return store.Result{}, err
	}
	d, err := lim.Peek(ctx, p.Name, key)
	if err != nil {
		return store.Result{}, err
	}
	return result(d), nil
}

func (tl *throughLimiter) Reset(ctx context.Context, key string, p store.Policy) error {
	lim, err := tl.limiter(p)
	if err != nil {
		return err
	}
	return lim.Reset(ctx, p.Name, key)
}
