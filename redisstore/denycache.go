package redisstore

import (
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// denyCache remembers, per key, the buckets' state of Redis's last denial
// (for each limit of the policy, the time its bucket is full again, from
// which its tokens at any later time follow), and denies locally every Take
// that state proves cannot have its tokens yet in some limit, whatever its
// cost. An entry lasts one refill interval (of the policy's slowest limit)
// at most, and not past the time the denied cost could be paid, so that a
// Refund or Reset made through another instance is seen here within one
// interval. Its zero capacity (or a nil *denyCache) disables it. It is
// bounded: when full, it first drops expired entries, and if none expired
// it does not remember the new key (which only costs a round trip). Safe for
// concurrent use.
//
// A key (the Redis key of the buckets) names the policy's limits too (see
// redisKey), so the policy given with it is the one remembered.
type denyCache struct {
	max int

	mu        sync.Mutex
	entries   map[string]denial
	nextSweep time.Time // a full cache is swept at most once per sweepEvery
}

// sweepEvery bounds how often a full cache looks for expired entries, so that
// a flood of new limited keys cannot make each request scan the cache.
const sweepEvery = time.Second

// A denial is the buckets' state Redis reported, on the local clock.
type denial struct {
	until time.Time // the entry is dropped then
	// full holds, per limit, when its bucket is full again (its
	// theoretical arrival time), as an offset from until.
	full [store.MaxLimits]time.Duration
}

// allowedAt returns when a Take of n tokens can succeed under p, unless
// another instance takes or refunds meanwhile: when every limit's bucket was
// last a burst from full n intervals ago.
func (d denial) allowedAt(p addrlimit.Policy, n int) time.Time {
	var wait time.Duration
	for i, lim := range p.Limits {
		w := d.full[i] + time.Duration(n)*lim.Interval - time.Duration(lim.Burst)*lim.Interval
		if i == 0 || w > wait {
			wait = w
		}
	}
	return d.until.Add(wait)
}

func newDenyCache(max int) *denyCache {
	if max == 0 {
		return nil
	}
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the denied Result of a Take of n tokens for key under p
// at now if the remembered state proves that n tokens do not exist yet in
// some limit.
func (c *denyCache) lookup(key string, now time.Time, n int, p addrlimit.Policy) (store.Result, bool) {
	if c == nil {
		return store.Result{}, false
	}
	c.mu.Lock()
	d, ok := c.entries[key]
	if ok && !now.Before(d.until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || !now.Before(d.allowedAt(p, n)) {
		return store.Result{}, false
	}
	var resets [store.MaxLimits]time.Duration
	for i := range p.Limits {
		resets[i] = max(d.until.Add(d.full[i]).Sub(now), 0)
	}
	return p.Result(false, n, resets), true
}

// remember records key's state from res, Redis's answer to a Take of n
// tokens under p sent at sent: a denial is remembered, an answer for a
// remembered key updates its state. sent is no later than Redis's clock
// when it answered, so the cache never denies longer than Redis would.
func (c *denyCache) remember(key string, sent time.Time, res store.Result, n int, p addrlimit.Policy) {
	if c == nil {
		return
	}
	var slowest time.Duration
	for _, lim := range p.Limits {
		slowest = max(slowest, lim.Interval)
	}
	d := denial{until: sent, full: res.Resets} // offsets from sent, for now
	d.until = d.allowedAt(p, n)
	if limit := sent.Add(slowest); limit.Before(d.until) {
		d.until = limit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.entries[key]
	if res.Allowed {
		if ok {
			for i := range p.Limits {
				old.full[i] = sent.Add(res.Resets[i]).Sub(old.until)
			}
			c.entries[key] = old
		}
		return
	}
	if !sent.Before(d.until) {
		return
	}
	for i := range p.Limits {
		d.full[i] = sent.Add(res.Resets[i]).Sub(d.until)
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
