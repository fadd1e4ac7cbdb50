package redisstore

import (
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
)

// denyCache remembers keys that Redis reported empty (less than one whole
// token), until the moment Redis would have one token again. Its zero capacity (or a nil *denyCache)
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
	retryAt, resetAt time.Time // local clock; retryAt: one whole token
	interval         time.Duration
}

func newDenyCache(max int) *denyCache {
	if max == 0 {
		return nil
	}
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the denied Result of a Take of n tokens for key if Redis
// said it is empty at now.
func (c *denyCache) lookup(key string, now time.Time, n int) (addrlimit.Result, bool) {
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
	return addrlimit.Result{
		RetryAfter: d.retryAt.Sub(now) + time.Duration(n-1)*d.interval,
		ResetAfter: d.resetAt.Sub(now),
	}, true
}

// remember records key as empty if res, the answer to a Take of n tokens
// under a refill interval, says so: until one whole token exists, which is
// (n-1) intervals before res.RetryAfter.
func (c *denyCache) remember(key string, now time.Time, res addrlimit.Result, n int, interval time.Duration) {
	if c == nil || res.Allowed || res.Remaining > 0 {
		return
	}
	retry := res.RetryAfter - time.Duration(n-1)*interval
	if retry <= 0 {
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
	c.entries[key] = denial{retryAt: now.Add(retry), resetAt: now.Add(res.ResetAfter), interval: interval}
}

// forget drops key: a Refund or Reset changed its bucket.
func (c *denyCache) forget(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

func (c *denyCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
