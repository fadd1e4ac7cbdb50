package store

import (
	"context"
	"time"
)

// Lease names one in-flight slot: the request ID holds a slot of Key under
// the policy named Policy. ID is unique per acquisition (the Limiter makes
// it); a store keys its slots by (Policy, Key) and tells holders apart by ID.
type Lease struct {
	Policy, Key, ID string
}

// InFlightStore is implemented by a Store that counts in-flight requests for
// a whole fleet: a slot is a lease that lapses LeaseTime after it was taken
// or last renewed, so that an instance that dies gives its slots back within
// that time. A Limiter built WithStore(s) with in-flight limits uses s for
// them when s implements InFlightStore, and keeps them in its own memory
// otherwise (each instance then enforces the limit alone).
//
// The Limiter renews the leases of requests still running every
// LeaseTime/3, in one call, and releases each lease exactly once when its
// handler returns. Every method receives a context that is not cancelled
// when the client goes away (it carries the Limiter's own deadline), and
// must be safe for concurrent use.
type InFlightStore interface {
	// LeaseTime is how long a slot stays held without renewal. It is read
	// once, by New, and must be positive.
	LeaseTime() time.Duration

	// Acquire takes a slot for l if fewer than limit unexpired leases of
	// (l.Policy, l.Key) are held, and reports whether it did and how many
	// are held after the call (on a refusal: how many refused it). An error
	// means nothing is known: the Limiter applies its FailurePolicy, and a
	// slot the store may still have taken lapses with its lease.
	Acquire(ctx context.Context, l Lease, limit int) (held int, ok bool, err error)

	// Renew extends every lease of ls that is still held by LeaseTime. A
	// lease that already lapsed is not taken again. An error leaves each
	// lease to lapse, never to be held longer than LeaseTime after its
	// last successful renewal.
	Renew(ctx context.Context, ls []Lease) error

	// Release gives l's slot back. Releasing a lease that lapsed or was
	// never taken is not an error and frees no other lease.
	Release(ctx context.Context, l Lease) error
}
