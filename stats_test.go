package addrlimit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatsCountsEveryDecisionUnderConcurrency checks that the counters Stats
// reads are exact sums, not estimates: eight goroutines send exempt,
// refunded, allowed and limited (credentialed) requests at once, with Stats
// read meanwhile, and every request they sent is counted once.
func TestStatsCountsEveryDecisionUnderConcurrency(t *testing.T) {
	const workers, each, burst = 8, 200, 50
	tok := mustToken(t, secret)
	lim := mustNew(t, burst, time.Hour, addrlimit.WithInternalToken(tok),
		addrlimit.WithRefund(func(status int) bool { return status == http.StatusNoContent }))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Free") != "" {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret)) // exempt
				serve(h, req("192.0.2.2:1", "X-Free", "1"))                     // allowed, refunded
				serve(h, req("192.0.2.3:1", "Authorization", "Bearer junk-token-0123456789"))
				_ = lim.Stats()
			}
		})
	}
	wg.Wait()
	s := lim.Stats()
	n := uint64(workers * each)
	assert.Equal(t, n, s.Exempt, "exempt, stats %+v", s)
	assert.Equal(t, n, s.Refunded, "refunded, stats %+v", s)
	assert.Equal(t, n+burst, s.Allowed, "allowed: every refunded one and the burst of 192.0.2.3, stats %+v", s)
	assert.Equal(t, n-burst, s.Limited, "limited, stats %+v", s)
	assert.Equal(t, n-burst, s.CredentialedLimited, "credentialed limited, stats %+v", s)
}

// With a Store given to WithStore, Stats.Keys (addrlimit_keys) counts this
// process's local buckets, not the store's: under FailLocal the mirror of
// what the store last said for each key, under FailOpen or FailClosed none.
func TestStatsKeysWithARemoteStoreCountsLocalBucketsOnly(t *testing.T) {
	for _, tc := range []struct {
		policy addrlimit.FailurePolicy
		want   int
	}{{addrlimit.FailLocal, 3}, {addrlimit.FailOpen, 0}, {addrlimit.FailClosed, 0}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(newFailingStore()), addrlimit.WithStoreFailure(tc.policy))
			for _, k := range []string{"a", "b", "c"} {
				d := lim.AllowKey(context.Background(), "", k, 1)
				require.Equal(t, addrlimit.Allowed, d.Outcome)
				require.False(t, d.Degraded, "the store answered")
			}
			assert.Equal(t, tc.want, lim.Stats().Keys, "3 buckets in the store")
		})
	}
}
