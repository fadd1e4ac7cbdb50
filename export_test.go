package addrlimit

import "github.com/addrlimit/addrlimit/store"

// NewTestMemoryStore returns the in-memory store a Limiter uses by default,
// so that it runs the storetest conformance suite and can back test stores.
// Each distinct Policy gets its own table.
func NewTestMemoryStore(maxKeys int) store.Store { return newMemStore(maxKeys) }

// NewTestFailover returns remote behind the failure policy p, as New puts a
// Store given to WithStore, so that storetest runs against it.
func NewTestFailover(remote store.Store, p FailurePolicy, maxKeys int) store.Store {
	return newFailover(remote, p, newMemStore(maxKeys))
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
