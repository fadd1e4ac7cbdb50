package redisstore

import (
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
)

// denyCache remembers keys that Redis reported limited, until the moment
// Redis would allow them again. Its zero capacity (or a nil *denyCache)
// disables it. It is bounded: when full, it first drops expired entries, and
// if none expired it does not remember the new key (which only costs a round
// trip). Safe for concurrent use.
type denyCache struct {
	max int

	mu        sync.Mutex
	entries   map[string]denial
	nextSweep time.Time // a full cache is swept at most once per sweepEvery
}

// sweepEvery bounds how often a full cache looks for expired entries, so that
// a flood of new limited keys cannot make each request scan the cache.
const sweepEvery = time.Second

type denial struct {
	retryAt, resetAt time.Time // local clock
}

func newDenyCache(max int) *denyCache {
	if max == 0 {
		return nil
	}
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns a denied Result for key if Redis said it is limited at now.
func (c *denyCache) lookup(key string, now time.Time) (addrlimit.Result, bool) {
	if c == nil {
		return addrlimit.Result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.entries[key]
	if !ok {
		return addrlimit.Result{}, false
	}
	if !now.Before(d.retryAt) {
		delete(c.entries, key)
		return addrlimit.Result{}, false
	}
	return addrlimit.Result{RetryAfter: d.retryAt.Sub(now), ResetAfter: d.resetAt.Sub(now)}, true
}

// remember records that key is limited for res.RetryAfter from now.
func (c *denyCache) remember(key string, now time.Time, res addrlimit.Result) {
	if c == nil || res.RetryAfter <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		if now.Before(c.nextSweep) {
			return
		}
		c.nextSweep = now.Add(sweepEvery)
		for k, d := range c.entries {
			if !now.Before(d.retryAt) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			return
		}
	}
	c.entries[key] = denial{retryAt: now.Add(res.RetryAfter), resetAt: now.Add(res.ResetAfter)}
}

func (c *denyCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
