package addrlimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/store"
)

// leases are the in-flight slots a Limiter holds in a fleet store: it
// renews every lease still held, all in one Renew call, every LeaseTime/3,
// from one goroutine that runs only while leases are held or releases are
// left to retry: it stops as soon as there are none, so a Limiter needs no
// Close.
type leases struct {
	store  store.InFlightStore
	every  time.Duration // LeaseTime/3
	prefix string        // this Limiter's part of each lease ID
	serial atomic.Uint64

	mu   sync.Mutex
	held map[*store.Lease]struct{}
	// perKey and perPolicy count the leases held by key and by policy
	// name (held, and the keys holding them), for Stats.
	perKey    map[leaseKey]int
	perPolicy map[string]leaseCount
	retry     map[*store.Lease]int // failed releases, with the tries left
	stop      chan struct{}        // closed to stop the renewing goroutine; nil: none runs
}

// releaseTries bounds the calls to Release per lease: the first, when the
// handler returns, then one per renewal tick. After the last failure the
// lease, no longer renewed, lapses in the store within LeaseTime.
const releaseTries = 3

func newLeases(s store.InFlightStore, leaseTime time.Duration) *leases {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return &leases{
		store: s, every: max(leaseTime/3, 1), prefix: hex.EncodeToString(b[:]) + "-",
		held: map[*store.Lease]struct{}{}, retry: map[*store.Lease]int{},
		perKey: map[leaseKey]int{}, perPolicy: map[string]leaseCount{},
	}
}

// leaseKey is a key under a policy, as a lease names them.
type leaseKey struct{ policy, key string }

// leaseCount is how many leases of a policy are held, by how many keys.
type leaseCount struct{ held, keys int }

// countLocked counts l as held (d = 1) or no longer held (d = -1).
func (ls *leases) countLocked(l *store.Lease, d int) {
	k := leaseKey{l.Policy, l.Key}
	n := ls.perKey[k] + d
	c := ls.perPolicy[l.Policy]
	c.held += d
	switch {
	case n == 0:
		delete(ls.perKey, k)
		c.keys--
	case n == 1 && d == 1:
		ls.perKey[k] = n
		c.keys++
	default:
		ls.perKey[k] = n
	}
	if c.held == 0 {
		delete(ls.perPolicy, l.Policy)
	} else {
		ls.perPolicy[l.Policy] = c
	}
}

// count returns the leases of policy held, and the keys holding them.
func (ls *leases) count(policy string) (held, keys int) {
	ls.mu.Lock()
	c := ls.perPolicy[policy]
	ls.mu.Unlock()
	return c.held, c.keys
}

// newLease returns the lease of a new slot of key under the policy: its ID
// is unique to this Limiter and acquisition.
func (ls *leases) newLease(policy, key string) *store.Lease {
	return &store.Lease{Policy: policy, Key: key, ID: ls.prefix + strconv.FormatUint(ls.serial.Add(1), 36)}
}

// hold renews l until drop or failed.
func (ls *leases) hold(l *store.Lease) {
	ls.mu.Lock()
	ls.held[l] = struct{}{}
	ls.countLocked(l, 1)
	ls.startLocked()
	ls.mu.Unlock()
}

// drop stops renewing l.
func (ls *leases) drop(l *store.Lease) {
	ls.mu.Lock()
	if _, ok := ls.held[l]; ok {
		delete(ls.held, l)
		ls.countLocked(l, -1)
	}
	ls.stopIfIdleLocked()
	ls.mu.Unlock()
}

// failed leaves l's release to be retried at the next renewal ticks.
func (ls *leases) failed(l *store.Lease) {
	ls.mu.Lock()
	ls.retry[l] = releaseTries - 1
	ls.startLocked()
	ls.mu.Unlock()
}

func (ls *leases) startLocked() {
	if ls.stop == nil {
		ls.stop = make(chan struct{})
		go ls.run(ls.stop)
	}
}

func (ls *leases) stopIfIdleLocked() {
	if ls.stop != nil && len(ls.held) == 0 && len(ls.retry) == 0 {
		close(ls.stop)
		ls.stop = nil
	}
}

// run renews the leases held every LeaseTime/3 and retries failed
// releases, until stop is closed.
func (ls *leases) run(stop <-chan struct{}) {
	t := time.NewTicker(ls.every)
	defer t.Stop()
	var batch []store.Lease
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ls.mu.Lock()
		batch = batch[:0]
		for l := range ls.held {
			batch = append(batch, *l)
		}
		var retry []*store.Lease
		for l := range ls.retry {
			retry = append(retry, l)
		}
		ls.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), ls.every)
		if len(batch) > 0 {
			_ = ls.store.Renew(ctx, batch) // on an error, each lease lapses or is renewed at the next tick
		}
		for _, l := range retry {
			err := ls.store.Release(ctx, *l)
			ls.mu.Lock()
			if n := ls.retry[l] - 1; err == nil || n <= 0 {
				delete(ls.retry, l)
				ls.stopIfIdleLocked()
			} else {
				ls.retry[l] = n
			}
			ls.mu.Unlock()
		}
		cancel()
	}
}
