package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/store"
)

// An Option configures a Limiter in New, in order; New reports the first
// invalid one.
type Option func(*config) error

type config struct {
	name        string
	burst       int
	limits      []Limit  // the default policy's further limits, from WithLimit
	policies    []Policy // named ones, from WithPolicy
	selector    PolicySelector
	cost        func(*http.Request) int
	refund      func(status int) bool
	keyFunc     KeyFunc
	exempt      func(*http.Request) bool
	token       *InternalToken
	denied      http.Handler
	maxKeys     int
	inFlight    int // the default policy's
	waitQueue   int // WithInFlightWait
	waitTimeout time.Duration
	observers   []func(context.Context, Decision)
	dryRun      bool
	store       store.Store
	headers     HeaderStyle
	failure     FailurePolicy
	failSet     bool // WithStoreFailure was given
	clock       func() time.Time

	decisionInContext bool
}

// WithBurst sets the default policy's burst (default: New's limit), at least 1.
func WithBurst(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("addrlimit: burst must be at least 1, got %d", n)
		}
		c.burst = n
		return nil
	}
}

// WithLimit adds to the default policy a limit of n requests per period per, in
// bursts of n, named by its window (see Limit.Name). 10 per second and 300 per
// minute is New(10, time.Second, WithLimit(300, time.Minute)). For named limits
// or other bursts, give WithPolicy a Policy.
func WithLimit(n int, per time.Duration) Option {
	return func(c *config) error {
		interval, err := limitInterval(n, per)
		if err != nil {
			return fmt.Errorf("addrlimit: WithLimit(%d, %v): %w", n, per, err)
		}
		c.limits = append(c.limits, Limit{Burst: n, Interval: interval})
		return nil
	}
}

// WithName names the default policy (default DefaultPolicyName): in the
// RateLimit-Policy field, Decision.Policy, Stats, the metrics' "policy" label,
// and the identity of its buckets in a shared Store. Give stacked limiters
// distinct names. The rule of a name is Policy.Validate's.
func WithName(name string) Option {
	return func(c *config) error {
		if err := checkPolicyName(name); err != nil {
			return err
		}
		c.name = name
		return nil
	}
}

// WithPolicy adds the named policy p, with its own buckets, header name and
// counters, for the calls a PolicySelector, a Call or AllowKey assign to it. p
// must pass Validate and have a name of its own.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if err := p.Validate(); err != nil {
			return err
		}
		c.policies = append(c.policies, p)
		return nil
	}
}

// A PolicySelector picks a request's policy ("" for the default) and key (""
// for the KeyFunc's) by what a client cannot forge; an unknown policy or an
// error falls back to both defaults. Prefix keys that are not addresses
// ("user:"+id).
type PolicySelector func(r *http.Request) (policy, key string, err error)

// WithPolicySelector sets the PolicySelector; without it every request uses the
// default policy.
func WithPolicySelector(f PolicySelector) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithPolicySelector given a nil function")
		}
		c.selector = f
		return nil
	}
}

// WithCost sets what a request costs in tokens (default 1; below 1 is charged
// 1). A cost over the smallest burst is refused without a Store call, with 413
// and no Retry-After (ErrCostOverBurst).
func WithCost(f func(r *http.Request) int) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithCost given a nil function")
		}
		c.cost = f
		return nil
	}
}

// WithRefund makes Handler give a request's tokens back when f accepts the
// first final status its handler wrote (101 for a hijack); s < 400 counts
// only failures. A handler that panicked or wrote nothing through its
// ResponseWriter (docs/frameworks.md) is not refunded. Allow, Decide and
// AllowKey never refund on their own (Limiter.Refund).
func WithRefund(f func(status int) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithRefund given a nil function")
		}
		c.refund = f
		return nil
	}
}

// WithKeyFunc sets how requests map to buckets (default RemoteAddrKey; behind
// proxies TrustedProxies.Key).
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithKeyFunc given a nil KeyFunc")
		}
		c.keyFunc = f
		return nil
	}
}

// WithInternalToken exempts requests that carry an accepted secret of t, and
// flags those with a retired one (Decision.RetiredToken). It combines with
// WithExempt: either exempts.
func WithInternalToken(t *InternalToken) Option {
	return func(c *config) error {
		if t == nil {
			return errors.New("addrlimit: WithInternalToken given a nil token")
		}
		c.token = t
		return nil
	}
}

// WithExempt sets a predicate for requests that bypass the limiter: no key, no
// bucket, no quota field; the Decision is Exempt. It must test something a
// client cannot forge (for tokens use WithInternalToken, for client
// certificates VerifiedPeers.Match). It is called first, concurrently.
func WithExempt(f func(*http.Request) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithExempt given a nil function")
		}
		c.exempt = f
		return nil
	}
}

// WithDeniedHandler replaces the status and body of denied responses (default
// 429, 413 for a cost over the burst, 503 under FailClosed). When h runs, the
// quota fields, Retry-After and Cache-Control are set and DecisionFromContext
// returns the Decision. h must not reveal Decision.Err.
func WithDeniedHandler(h http.Handler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("addrlimit: WithDeniedHandler given a nil handler")
		}
		c.denied = h
		return nil
	}
}

// WithMaxKeys bounds the exact buckets held in memory per policy (default
// DefaultMaxKeys), also those of a remote store's local fallback. Past it,
// buckets move to a fixed-size approximate memory that never gives a key more
// than it had (docs/memory.md).
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("addrlimit: max keys must be at least 1, got %d", n)
		}
		c.maxKeys = n
		return nil
	}
}

// WithObserver adds f, told every decision (exempt ones too) with its context,
// synchronously, before the response is written, in the order added. f is
// called concurrently and should be quick; see LogObserver.
func WithObserver(f func(context.Context, Decision)) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithObserver given a nil function")
		}
		c.observers = append(c.observers, f)
		return nil
	}
}

// WithDryRun decides, counts, observes and sets quota fields as usual but never
// denies: a Limited decision has DryRun set and is served.
func WithDryRun() Option {
	return func(c *config) error {
		c.dryRun = true
		return nil
	}
}

// WithStore keeps the buckets in s (a Redis store shared by a fleet, say);
// New calls s's CheckPolicy, if it has one, for every policy.
func WithStore(s store.Store) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("addrlimit: WithStore given a nil Store")
		}
		c.store = s
		return nil
	}
}

// HeaderStyle selects the quota fields of counted responses (WithHeaders).
type HeaderStyle uint8

const (
	// HeaderDraft (the default) sends the IETF httpapi draft fields:
	//	RateLimit-Policy: "<name>";q=<burst>;w=<seconds to refill the burst>
	//	RateLimit: "<name>";r=<remaining>;t=<seconds until the next token>
	// with "<name>-<limit>" members for several limits.
	HeaderDraft HeaderStyle = iota
	// HeaderXRateLimit sends X-RateLimit-Limit (the burst), -Remaining and
	// -Reset (seconds until full) of the tightest limit.
	HeaderXRateLimit
	// HeaderNone sends no quota fields.
	HeaderNone
)

// The header writer numbers its styles as HeaderStyle does: a mismatch
// fails to compile (an array of length other than 0, or a negative one).
var (
	_ [HeaderDraft - headers.Draft]struct{}           = [0]struct{}{}
	_ [HeaderXRateLimit - headers.XRateLimit]struct{} = [0]struct{}{}
	_ [HeaderNone - headers.None]struct{}             = [0]struct{}{}
)

// String returns "draft", "x-ratelimit" or "none".
func (s HeaderStyle) String() string {
	switch s {
	case HeaderDraft:
		return "draft"
	case HeaderXRateLimit:
		return "x-ratelimit"
	case HeaderNone:
		return "none"
	}
	return fmt.Sprintf("HeaderStyle(%d)", uint8(s))
}

// WithHeaders selects the quota fields; the default is HeaderDraft.
func WithHeaders(s HeaderStyle) Option {
	return func(c *config) error {
		if s > HeaderNone {
			return fmt.Errorf("addrlimit: unknown header style %d", s)
		}
		c.headers = s
		return nil
	}
}

// FailurePolicy says what a Limiter does when its Store returns an error.
type FailurePolicy uint8

const (
	// FailLocal (the default) decides with a local bucket continuing from
	// what the store last said of the key; a key it never reported starts
	// full. A DebtStore is later charged what the local bucket allowed.
	FailLocal FailurePolicy = iota
	// FailOpen lets the request through, quota unknown.
	FailOpen
	// FailClosed denies it: 503 with Retry-After: 1.
	FailClosed
)

// String returns "local", "open" or "closed".
func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "local"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// WithStoreFailure sets the failure policy (default FailLocal); it needs
// WithStore. A decision it took has Err and Degraded set; a failed refund is
// only counted (Stats.StoreErrors).
func WithStoreFailure(p FailurePolicy) Option {
	return func(c *config) error {
		if p > FailClosed {
			return fmt.Errorf("addrlimit: unknown failure policy %d", p)
		}
		c.failure, c.failSet = p, true
		return nil
	}
}

// WithClock sets the clock of the in-memory buckets (a Store keeps its own), to
// decide in virtual time (cmd/addrlimit-replay) or under a fake clock; it is
// read concurrently. A reading earlier than the latest counts as the latest.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("addrlimit: WithClock given a nil function")
		}
		c.clock = now
		return nil
	}
}
