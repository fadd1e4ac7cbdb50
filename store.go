package addrlimit

import (
	"context"
	"fmt"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/headers"
)

// Policy is one bucket shape: capacity Burst, refilled one token every
// Interval, under the name Name; N requests per period P in bursts of B is
// Policy{Name: name, Burst: B, Interval: P / N}. A Limiter has a default
// policy (New's limit and period, WithBurst, WithName) and any number of
// named ones, which you construct and give to WithPolicy.
// The name appears in the RateLimit-Policy header field, in Stats and in
// metrics, and is part of the bucket's identity in a Store.
type Policy struct {
	Name     string
	Burst    int
	Interval time.Duration
}

// Validate reports whether a Limiter accepts p: Name is 1 to 64 bytes of
// A-Z a-z 0-9 . _ - (so that it needs no escaping in a header field, a
// metric label or a store key), Burst is at least 1, Interval is positive,
// and Burst × Interval fits the bucket arithmetic (a full refill of under
// about 73 years). WithPolicy calls it; a Store may call it on the policies
// it is given, so that one rule holds everywhere.
func (p Policy) Validate() error {
	if err := checkPolicyName(p.Name); err != nil {
		return err
	}
	if p.Burst < 1 {
		return fmt.Errorf("addrlimit: policy %q: burst must be at least 1, got %d", p.Name, p.Burst)
	}
	if p.Interval <= 0 {
		return fmt.Errorf("addrlimit: policy %q: interval must be positive, got %v", p.Name, p.Interval)
	}
	if _, err := bucket.NewPolicy(p.Burst, p.Interval); err != nil {
		return fmt.Errorf("addrlimit: policy %q: %w", p.Name, err)
	}
	return nil
}

// DefaultPolicyName names the default policy unless WithName says otherwise.
const DefaultPolicyName = "default"

// Result is a Store's answer about one bucket.
type Result struct {
	// Allowed reports, for Take, whether the tokens were charged; for Peek
	// and Refund, whether at least one whole token is available now.
	Allowed bool
	// Remaining is the number of whole tokens left after the call.
	Remaining int
	// RetryAfter is how long until the request can succeed: for a denied
	// Take of n tokens, until n tokens exist; otherwise, until one whole
	// token exists, which is zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again. It is the
	// bucket's whole state: a Limiter uses it to continue locally from what
	// a remote store last said (see FailLocal).
	ResetAfter time.Duration
}

// Store keeps token buckets, one per (policy, key). The in-memory store that a
// Limiter uses by default is built in; WithStore plugs in another, such as
// the redisstore module. Package storetest is the conformance suite every
// Store should pass.
//
// Contract, for every method:
//   - Buckets of different policies are distinct: Name, Burst and Interval
//     all belong to a bucket's identity, so two limiters with different
//     policies on one store never share a bucket. Two equal policies share
//     their buckets, which is how a fleet shares one budget.
//   - Each call is atomic: concurrent calls for one key, from one process or
//     many, never let more than Burst tokens through a full bucket.
//   - Decisions are those of a token bucket (GCRA): Take of n at an instant
//     when the bucket holds at least n tokens removes them; otherwise it is
//     denied and changes nothing.
//   - The Limiter passes 1 <= n <= p.Burst, a valid policy, and non-empty keys
//     (the strings its KeyFunc returned, UnkeyedKey, or keys given to
//     Limiter.AllowKey). Keys may hold any bytes.
//   - Take and the Peek of a refused cost get the request's context
//     without its cancellation (context.WithoutCancel): a client that hangs
//     up does not end the decision, so a store bounds each call by a timeout
//     of its own.
//   - A non-nil error means the store could not answer (a remote store timed
//     out, say). The Limiter then applies its failure policy (see
//     WithStoreFailure) and reports the error to observers, never to the
//     client. Errors should start with the store's package name.
//
// Implementations must be safe for concurrent use. A store that cannot
// represent every valid policy implements [PolicyChecker], so that New
// refuses such a policy instead of every decision failing.
type Store interface {
	// Take charges n tokens to key's bucket under p.
	Take(ctx context.Context, key string, p Policy, n int) (Result, error)
	// Refund gives n tokens back to key's bucket, never filling it above
	// Burst (refunding a full or missing bucket changes nothing).
	Refund(ctx context.Context, key string, p Policy, n int) (Result, error)
	// Peek reports key's bucket without changing it.
	Peek(ctx context.Context, key string, p Policy) (Result, error)
	// Reset makes key's bucket full, as if it had never been used. Resetting
	// a key that has no bucket is not an error.
	Reset(ctx context.Context, key string, p Policy) error
}

// PolicyChecker is implemented by a Store whose buckets have bounds of their
// own (a remote store's arithmetic, say). New calls CheckPolicy once for
// every policy of a Limiter built WithStore and fails with its error, which
// should name the bound; the Limiter never passes the store a policy it
// refused.
type PolicyChecker interface {
	CheckPolicy(p Policy) error
}

// maxPolicyName bounds the length of a policy name.
const maxPolicyName = headers.MaxNameLen

// checkPolicyName reports whether name may name a policy (headers.CheckName).
func checkPolicyName(name string) error {
	if err := headers.CheckName(name); err != nil {
		return fmt.Errorf("addrlimit: %w", err)
	}
	return nil
}
