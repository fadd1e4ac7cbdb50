package addrlimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
)

// seam is the one way a Limiter reaches its buckets: a Store as the Limiter
// calls it, by the key's hash (which is all the in-memory table needs, so the
// default path allocates nothing) and with the policy's state at hand. New
// picks one of its two implementations once: memStore, the default, or
// failover, a Store given to WithStore behind its failure policy. Both are
// also Stores, so that storetest runs against exactly what production runs.
type seam interface {
	Store
	// take charges n tokens to k's buckets under ps.
	take(ctx context.Context, ps *policyState, k bucketKey, n int) answer
	// peek reports k's bucket without changing it.
	peek(ctx context.Context, ps *policyState, k bucketKey) answer
	// refund gives n tokens back to the bucket that paid them for a
	// decision (degraded: one the failure policy took), reports whether any
	// bucket got them, and returns that bucket's state.
	refund(ctx context.Context, ps *policyState, k bucketKey, n int, degraded bool) (Result, bool, error)
	// reset makes k's bucket full.
	reset(ctx context.Context, ps *policyState, k bucketKey) error
	// acquire takes an in-flight slot of k under ps (whose InFlight is
	// set), under the failure policy: the slot it returns is the zero slot
	// unless one was taken.
	acquire(ctx context.Context, ps *policyState, k bucketKey) (slot, slotAnswer)
	// release frees a slot that acquire took, where it took it, and
	// returns a fleet store's error (the seam then retries or lets the
	// lease lapse), whether ctx is cancelled or not. It is called once per
	// slot.
	release(ctx context.Context, s slot) error
	// keys is how this seam's keys are made, for the Limiter to make them.
	keys() keyer
}

// bucketKey is a bucket's key as a seam gets it: its hash, and its string
// when the seam asked for strings (a remote store needs them; the in-memory
// table does not, so the default path never builds one).
type bucketKey struct {
	hash uint64
	s    string
}

// keyer makes the seam's bucketKeys: hashed with its seed, and with the
// string kept when the seam needs strings (a remote store) or the caller
// asks for it.
type keyer struct {
	seed    maphash.Seed
	strings bool
}

// of is the key s (which hashes as its bytes would).
func (kr keyer) of(s string) bucketKey { return bucketKey{hash: maphash.String(kr.seed, s), s: s} }

// ofBytes is the key b, with its string only if str is set or the seam
// needs strings: b may be on the caller's stack.
func (kr keyer) ofBytes(b []byte, str bool) bucketKey {
	k := bucketKey{hash: maphash.Bytes(kr.seed, b)}
	if str || kr.strings {
		k.s = string(b)
	}
	return k
}

// answer is a seam's answer to take and peek.
type answer struct {
	Result
	tight   int   // the index of the tightest limit (see Result)
	err     error // the store failed and the failure policy decided
	unknown bool  // the quota is unknown (FailOpen, FailClosed): Decision.QuotaUnknown
}

// memStore is the in-memory store: one bucket.Table per policy. The zero
// value is not ready; use newMemStore.
type memStore struct {
	seed    maphash.Seed
	epoch   time.Time
	clock   func() time.Time // WithClock's; nil: time.Since, the default path
	maxKeys int

	mu    sync.Mutex
	lanes map[string]*policyState // by policyID: the Limiter's policies, and those its Store methods meet
}

func newMemStore(maxKeys int) *memStore {
	return &memStore{seed: maphash.MakeSeed(), epoch: time.Now(), maxKeys: maxKeys, lanes: map[string]*policyState{}}
}

// now is the store's clock: nanoseconds since it was made, read from
// WithClock's clock if one was given. A reading earlier than one a table
// shard has seen counts as that one (bucket.Table keeps each shard's latest
// time), so a clock that goes back never refills a bucket.
func (m *memStore) now() int64 {
	if m.clock != nil {
		return int64(m.clock().Sub(m.epoch))
	}
	return int64(time.Since(m.epoch))
}

// lane returns the state of policy p, with an empty table if p is new.
// Policies reach it validated: by New, or by the Store contract.
func (m *memStore) lane(p Policy) *policyState {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := p.id()
	ps := m.lanes[id]
	if ps == nil {
		var bps []bucket.Policy
		for _, lim := range p.Limits {
			bp, err := bucket.NewPolicy(lim.Burst, lim.Interval)
			if err != nil {
				panic("addrlimit: " + err.Error()) // the caller broke the Store contract
			}
			bps = append(bps, bp)
		}
		ps = &policyState{Policy: p.named(), maxCost: p.maxCost(), table: bucket.NewTable(bps[0], m.maxKeys, bps[1:]...)}
		for _, lim := range p.Limits {
			ps.longest = max(ps.longest, lim.tau())
		}
		m.lanes[id] = ps
	}
	return ps
}

func (m *memStore) keys() keyer { return keyer{seed: m.seed} }

// taken is the answer of ps's table to a Take of n tokens: allowed, and
// the buckets' states f after it.
func (ps *policyState) taken(allowed bool, n int, f *bucket.Fulls) (a answer) {
	need := 1
	if !allowed {
		need = n
	}
	a.Allowed, a.Resets = allowed, [MaxLimits]time.Duration(*f) // bucket.MaxLimits == MaxLimits
	a.tight = ps.summarize(&a.Result, need)
	return a
}

// peeked is the answer of ps's table to a Peek or a Refund: buckets in the
// states f, allowed if each holds a whole token.
func (ps *policyState) peeked(f bucket.Fulls) answer {
	a := ps.taken(true, 1, &f)
	a.Allowed = a.Remaining > 0
	return a
}

func (m *memStore) take(_ context.Context, ps *policyState, k bucketKey, n int) answer {
	allowed, _, f := ps.table.Take(k.hash, m.now(), int64(n))
	return ps.taken(allowed, n, &f)
}

func (m *memStore) peek(_ context.Context, ps *policyState, k bucketKey) answer {
	return ps.peeked(ps.table.Peek(k.hash, m.now()))
}

func (m *memStore) refund(_ context.Context, ps *policyState, k bucketKey, n int, _ bool) (Result, bool, error) {
	return ps.peeked(ps.table.Refund(k.hash, m.now(), int64(n))).Result, true, nil
}

func (m *memStore) reset(_ context.Context, ps *policyState, k bucketKey) error {
	ps.table.Reset(k.hash, m.now())
	return nil
}

func (m *memStore) Take(ctx context.Context, key string, p Policy, n int) (Result, error) {
	return m.take(ctx, m.lane(p), m.keys().of(key), n).Result, nil
}

func (m *memStore) Refund(ctx context.Context, key string, p Policy, n int) (Result, error) {
	res, _, err := m.refund(ctx, m.lane(p), m.keys().of(key), n, false)
	return res, err
}

func (m *memStore) Peek(ctx context.Context, key string, p Policy) (Result, error) {
	return m.peek(ctx, m.lane(p), m.keys().of(key)).Result, nil
}

func (m *memStore) Reset(ctx context.Context, key string, p Policy) error {
	return m.reset(ctx, m.lane(p), m.keys().of(key))
}
