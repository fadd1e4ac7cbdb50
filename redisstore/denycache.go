package redisstore

import (
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
)

// denyCache remembers, per key, the bucket state of Redis's last denial (the
// time the bucket is full again, from which the tokens at any later time
// follow), and denies locally every Take that state proves cannot have its
// tokens yet, whatever its cost. An entry lasts one refill interval at most
// (and not past the time the denied cost could be paid), so that a Refund or
// Reset made through another instance is seen here within one interval. Its
// zero capacity (or a nil *denyCache) disables it. It is bounded: when full,
// it first drops expired entries, and if none expired it does not remember
// the new key (which only costs a round trip). Safe for concurrent use.
type denyCache struct {
	max int

	mu        sync.Mutex
	entries   map[string]denial
	nextSweep time.Time // a full cache is swept at most once per sweepEvery
}

// sweepEvery bounds how often a full cache looks for expired entries, so that
// a flood of new limited keys cannot make each request scan the cache.
const sweepEvery = time.Second

// A denial is a bucket state Redis reported, on the local clock.
type denial struct {
	until         time.Time // the entry is dropped then
	resetAt       time.Time // the bucket is full again: its theoretical arrival time
	interval, tau time.Duration
}

// allowedAt returns when a Take of n tokens can succeed, unless another
// instance takes or refunds meanwhile: n intervals after the bucket was
// last a burst (tau) from full.
func (d denial) allowedAt(n int) time.Time {
	return d.resetAt.Add(time.Duration(n)*d.interval - d.tau)
}

func newDenyCache(max int) *denyCache {
	if max == 0 {
		return nil
	}
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the denied Result of a Take of n tokens for key at now if
// the remembered state proves that n tokens do not exist yet.
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
	if !now.Before(d.until) {
		delete(c.entries, key)
		return addrlimit.Result{}, false
	}
	at := d.allowedAt(n)
	if !now.Before(at) {
		return addrlimit.Result{}, false
	}
	res := addrlimit.Result{
		Remaining:  int(max(0, (now.Sub(d.resetAt)+d.tau)/d.interval)),
		RetryAfter: at.Sub(now),
		ResetAfter: d.resetAt.Sub(now),
	}
	res.Resets[0] = res.ResetAfter
	return res, true
}

// remember records key's state from res, Redis's answer to a Take of n
// tokens sent at sent, under a refill interval and burst: a denial is
// remembered, an answer for a remembered key updates its state. sent is
// no later than Redis's clock when it answered, so the cache never denies
// longer than Redis would.
func (c *denyCache) remember(key string, sent time.Time, res addrlimit.Result, n int, interval time.Duration, burst int) {
	if c == nil {
		return
	}
	d := denial{resetAt: sent.Add(res.ResetAfter), interval: interval, tau: time.Duration(burst) * interval}
	d.until = d.allowedAt(n)
	if limit := sent.Add(interval); limit.Before(d.until) {
		d.until = limit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.entries[key]
	if res.Allowed {
		if ok {
			old.resetAt = d.resetAt
			c.entries[key] = old
		}
		return
	}
	if !sent.Before(d.until) {
		return
	}
	if !ok && len(c.entries) >= c.max {
		if sent.Before(c.nextSweep) {
			return
		}
		c.nextSweep = sent.Add(sweepEvery)
		for k, e := range c.entries {
			if !sent.Before(e.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			return
		}
	}
	c.entries[key] = d
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
