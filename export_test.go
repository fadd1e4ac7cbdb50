package addrlimit

// NewTestMemoryStore returns the in-memory store a Limiter uses by default,
// so that it runs the storetest conformance suite and can back test stores.
// Each distinct Policy gets its own table.
func NewTestMemoryStore(maxKeys int) Store { return newMemStore(maxKeys) }

// NewTestFailover returns remote behind the failure policy p, as New puts a
// Store given to WithStore, so that storetest runs against it.
func NewTestFailover(remote Store, p FailurePolicy, maxKeys int) Store {
	return newFailover(remote, p, newMemStore(maxKeys))
}

// MaxDebtKeys is how many keys a policy's debt record holds.
const MaxDebtKeys = maxDebtKeys

// CountDigestComparisons makes every token count its digest comparisons in
// *n until the returned function restores the plain comparison. Tests that
// use it must not run in parallel.
func CountDigestComparisons(n *int) (restore func()) {
	plain := compareDigests
	compareDigests = func(x, y []byte) int { *n++; return plain(x, y) }
	return func() { compareDigests = plain }
}
