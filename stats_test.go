package addrlimit_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
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
