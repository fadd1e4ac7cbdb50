package addrlimit

import (
	"context"

	"github.com/addrlimit/addrlimit/store"
)

// NewTestMemoryStore returns the in-memory tables a Limiter uses by default
// as a store.Store, so that they run the storetest conformance suite and
// can back test stores. Each distinct Policy gets its own table.
func NewTestMemoryStore(maxKeys int) store.Store { return testMemStore{newMemStore(maxKeys)} }

// testMemStore is a memStore called as a Store: by the key's string, with
// the policy's table looked up per call.
type testMemStore struct{ m *memStore }

func (s testMemStore) Take(ctx context.Context, key string, p Policy, n int) (store.Result, error) {
	return s.m.take(ctx, s.m.lane(p), s.m.keys().of(key), n).Result, nil
}

func (s testMemStore) Refund(ctx context.Context, key string, p Policy, n int) (store.Result, error) {
	res, _, err := s.m.refund(ctx, s.m.lane(p), s.m.keys().of(key), n, false)
	return res, err
}

func (s testMemStore) Peek(ctx context.Context, key string, p Policy) (store.Result, error) {
	return s.m.peek(ctx, s.m.lane(p), s.m.keys().of(key)).Result, nil
}

func (s testMemStore) Reset(ctx context.Context, key string, p Policy) error {
	return s.m.reset(ctx, s.m.lane(p), s.m.keys().of(key))
}

// MaxDebtKeys is how many keys a policy's debt record holds.
const MaxDebtKeys = maxDebtKeys

// CountDigestComparisons makes every token count the digests it compares
// until the returned function stops counting and reports how many. Tests
// that use it must not run in parallel.
func CountDigestComparisons() (stop func() int) {
	comparisons.Store(0)
	countComparisons.Store(true)
	return func() int {
		countComparisons.Store(false)
		return int(comparisons.Load())
	}
}
