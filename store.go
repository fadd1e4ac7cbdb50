package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
)

// Policy is the bucket shape a Limiter asks its Store to enforce: capacity
// Burst, refilled one token every Interval.
type Policy struct {
	Burst    int
	Interval time.Duration
}

// Result is a Store's answer for one request.
type Result struct {
	// Allowed reports whether the request may proceed; it consumed one token.
	Allowed bool
	// Remaining is the number of whole tokens left after this request.
	Remaining int
	// RetryAfter is the time until at least one whole token exists: for a
	// denied request, when to retry; zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
}

// Store keeps the token buckets of a Limiter, one per key.
//
// Take charges one request to key under policy p and returns the decision. It
// must decide and count atomically: concurrent calls for one key, from one or
// many processes, never let more than Burst requests through a full bucket. A
// denied request consumes nothing. Take must be safe for concurrent use.
//
// A non-nil error means the store could not decide (a remote store timed out,
// say); the Limiter then applies its failure policy (see WithStoreFailure) and
// reports the error to observers, never to the client. The keys a Limiter
// passes are the strings its KeyFunc returned, or UnkeyedKey.
type Store interface {
	Take(ctx context.Context, key string, p Policy) (Result, error)
}

// MemoryStore is the in-process Store that a Limiter uses unless WithStore
// says otherwise. It keeps at most maxKeys buckets in a sharded table of
// about 30 bytes per key (key hashes, never key strings):
//
//   - a bucket that has refilled completely is indistinguishable from a new one
//     and is dropped as the table comes across it;
//   - when the table is full, a new key replaces the fullest bucket of a random
//     sample, never a bucket that is empty: an active abuser keeps its empty
//     bucket and stays limited;
//   - if all sampled buckets are empty, the new key shares one overflow bucket
//     with every other key in that situation, which limits them together rather
//     than not at all.
//
// Keys are identified by a 64-bit keyed hash (hash/maphash, seeded at random
// per store), so clients cannot aim for collisions. Two keys that collide
// share a bucket: that limits them more, never less. With 10 million live
// keys the chance of any collision is about 2.7e-6.
//
// A MemoryStore enforces the policy of the first Take (or of the Limiter it
// is given to) and rejects a different one: give each Limiter its own. It is
// safe for concurrent use and starts no goroutine.
type MemoryStore struct {
	maxKeys int
	seed    maphash.Seed
	epoch   time.Time

	mu    sync.Mutex                   // serialises the first bind
	table atomic.Pointer[bucket.Table] // set once by bind
}

// DefaultMaxKeys is the capacity of the default MemoryStore: about 32 MB when
// full. Buckets are dropped once they have refilled, so the table holds only
// the clients seen within one full refill time (60 s for 300/min), and this
// many distinct clients in that time is far beyond normal load.
const DefaultMaxKeys = 1 << 20

// NewMemoryStore returns an empty in-memory store that keeps at most maxKeys
// buckets. maxKeys must be at least 1.
func NewMemoryStore(maxKeys int) (*MemoryStore, error) {
	if maxKeys < 1 {
		return nil, fmt.Errorf("addrlimit: max keys must be at least 1, got %d", maxKeys)
	}
	return &MemoryStore{maxKeys: maxKeys, seed: maphash.MakeSeed(), epoch: time.Now()}, nil
}

var errPolicyMismatch = errors.New("addrlimit: MemoryStore already enforces a different policy; give each Limiter its own store")

// bind fixes the store's policy, or checks that it is the one already fixed.
func (m *MemoryStore) bind(p Policy) (*bucket.Table, error) {
	t := m.table.Load()
	if t == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if t = m.table.Load(); t == nil {
			pol, err := bucket.NewPolicy(p.Burst, p.Interval)
			if err != nil {
				return nil, fmt.Errorf("addrlimit: %w", err)
			}
			t = bucket.NewTable(pol, m.maxKeys)
			m.table.Store(t)
		}
	}
	if pol := t.Policy(); pol.Burst() != p.Burst || pol.Interval() != p.Interval {
		return nil, errPolicyMismatch
	}
	return t, nil
}

func (m *MemoryStore) now() int64 { return int64(time.Since(m.epoch)) }

// Take implements Store. It fails only when p differs from the policy the
// store enforces.
func (m *MemoryStore) Take(_ context.Context, key string, p Policy) (Result, error) {
	t, err := m.bind(p)
	if err != nil {
		return Result{}, err
	}
	return Result(t.Take(maphash.String(m.seed, key), m.now(), 1)), nil
}

// takeAddr is the Limiter's fast path for the default key: it hashes the
// normalised address bytes instead of formatting the key string.
func (m *MemoryStore) takeAddr(t *bucket.Table, a netip.Addr) Result {
	b := a.As16()
	return Result(t.Take(maphash.Bytes(m.seed, b[:]), m.now(), 1))
}

// Len returns the number of buckets held.
func (m *MemoryStore) Len() int {
	if t := m.loadTable(); t != nil {
		return t.Stats().Keys
	}
	return 0
}

// Evictions returns how many buckets that had not refilled were dropped to
// make room for new keys.
func (m *MemoryStore) Evictions() uint64 {
	if t := m.loadTable(); t != nil {
		return t.Stats().Evictions
	}
	return 0
}

// counts returns how many requests the store allowed and denied.
func (m *MemoryStore) counts() (allowed, limited uint64) {
	if t := m.loadTable(); t != nil {
		st := t.Stats()
		return st.Allowed, st.Limited
	}
	return 0, 0
}

// Overflows returns how many requests were charged to the shared overflow
// bucket because the table was full of empty buckets.
func (m *MemoryStore) Overflows() uint64 {
	return 0
}

func (m *MemoryStore) loadTable() *bucket.Table { return m.table.Load() }
