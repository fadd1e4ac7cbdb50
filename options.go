package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// An Option configures a Limiter in New. Options are applied in order; New
// reports the first invalid one.
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
	store       Store
	headers     HeaderStyle
	failure     FailurePolicy
	failSet     bool // WithStoreFailure was given
	clock       func() time.Time

	decisionInContext bool
}

// WithBurst sets the default policy's bucket capacity: how many requests a
// client with a full bucket may make at once. The default is the limit
// passed to New. n must be at least 1.
func WithBurst(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("addrlimit: burst must be at least 1, got %d", n)
		}
		c.burst = n
		return nil
	}
}

// WithLimit adds to the default policy a limit of n requests per period
// per, in bursts of up to n: a request is then admitted only if New's limit
// and every WithLimit limit have its cost, and when one denies, none is
// charged. 10 per second and 300 per minute and 10,000 per day is
//
//	addrlimit.New(10, time.Second, addrlimit.WithLimit(300, time.Minute), addrlimit.WithLimit(10000, 24*time.Hour))
//
// Each limit is named by its window (see Limit.Name); New fails if two
// share one, or if the policy would have more than MaxLimits limits. For
// named limits or other bursts, give WithPolicy a Policy.
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

// WithName names the default policy (DefaultPolicyName otherwise): the name
// appears in the RateLimit-Policy field, Decision.Policy, Stats and the
// metrics' "policy" label, and separates the buckets of limiters that share
// a Store. Give stacked limiters distinct names. A name is 1 to 64 bytes of
// A-Z a-z 0-9 . _ -. It is not the metrics' "limiter" label: that is the
// name given to the collector (promcollector.New, otelcollector.WithName).
func WithName(name string) Option {
	return func(c *config) error {
		if err := checkPolicyName(name); err != nil {
			return err
		}
		c.name = name
		return nil
	}
}

// WithPolicy adds the named policy p, for the requests that a
// PolicySelector (WithPolicySelector) or an AllowKey caller assigns to it:
// 1000 requests per minute in bursts of up to 100 is
//
//	addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 100, Interval: time.Minute / 1000}}})
//
// Each policy has its own buckets, its own RateLimit-Policy name and its own
// counters in Stats. Names follow the rules of WithName and must be
// distinct; p must pass Validate.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if err := p.Validate(); err != nil {
			return err
		}
		c.policies = append(c.policies, p)
		return nil
	}
}

// A PolicySelector picks, for one request, the name of the policy that
// limits it and the key of its bucket under that policy: for example the
// partner or plan that a verified credential identifies. A policy of ""
// means the default policy; a key of "" means the KeyFunc's key (by default
// the client address). So ("", "", nil) leaves the request to the default
// policy and the KeyFunc.
//
// Select only by something a client cannot forge: a credential you have
// verified. A key taken from an unverified header hands an attacker a fresh
// bucket per value it invents.
//
// Keys are one namespace per policy: address keys (AddrKey), UnkeyedKey,
// and the keys of selectors, KeyFuncs and AllowKey all meet in it (which is
// what lets AllowKey, Peek and Reset reach a client's bucket by its
// address, in any notation: see Limiter.Reset). Give identity keys a prefix
// no address has, such as "user:"+id (not hexadecimal digits: "cafe:"+id
// can spell an IPv6 address): a user named "192.0.2.9" under the same
// policy would otherwise spend the bucket of the client at that address.
//
// An unknown policy name or an error never skips the limit: the request is
// charged to the default policy under the KeyFunc's key, and Decision.Err
// reports ErrUnknownPolicy or the error. A PolicySelector is called
// concurrently, after the exemption check.
type PolicySelector func(r *http.Request) (policy, key string, err error)

// WithPolicySelector sets the function that assigns requests to the policies
// added with WithPolicy. Without it, every request uses the default policy.
func WithPolicySelector(f PolicySelector) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithPolicySelector given a nil function")
		}
		c.selector = f
		return nil
	}
}

// WithCost sets how many tokens a request costs (1 without it): a batch or a
// GraphQL query may cost more than a single read. f is called concurrently,
// once per counted request, before the handler runs.
//
// A cost above the policy's burst (its smallest, with several limits) can
// never be paid: the request is refused with ErrCostOverBurst by the policy
// alone (no Store call, so a flood of them costs a remote store nothing)
// and charged nothing. Handler answers it
// 413 Content Too Large, without Retry-After (no wait makes it possible; a
// 413 tells the client to send less) and without quota fields: the bucket
// was not asked, so its quota is unknown (Decision.QuotaUnknown).
// A WithDeniedHandler handler recognises the case by
// errors.Is(d.Err, addrlimit.ErrCostOverBurst). A cost below 1 is charged
// as 1 and reported as ErrInvalidCost; it is never a refund.
func WithCost(f func(r *http.Request) int) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithCost given a nil function")
		}
		c.cost = f
		return nil
	}
}

// WithRefund makes Handler give back a request's tokens when its response
// status satisfies f: WithRefund(func(s int) bool { return s < 400 }) counts
// only failed requests, as login brute-force protection wants.
//
// The request is charged before the handler runs, as usual, so concurrent
// requests can never exceed the budget; the refund follows when the handler
// returns, and never fills a bucket above its burst. The status is the first
// final one the handler wrote through the ResponseWriter it was given (101
// for a connection hijacked before any status). A request whose handler
// wrote nothing there is never refunded and f is not called (README
// "Frameworks": gin and echo may write elsewhere or later). A handler that
// panics is not refunded either. The
// ResponseWriter the handler gets keeps http.Flusher, http.Hijacker and
// io.ReaderFrom working and supports http.ResponseController through Unwrap.
// Allow, Decide and AllowKey never refund on their own; see Limiter.Refund.
func WithRefund(f func(status int) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithRefund given a nil function")
		}
		c.refund = f
		return nil
	}
}

// WithKeyFunc sets how requests map to buckets. The default, RemoteAddrKey,
// keys by the connection's peer address; behind proxies use TrustedProxies.Key.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithKeyFunc given a nil KeyFunc")
		}
		c.keyFunc = f
		return nil
	}
}

// WithInternalToken exempts requests that carry one of t's accepted secrets
// (see InternalToken.Match) and flags requests that carry one of its retired
// secrets (Decision.RetiredToken, Stats.RetiredTokenLimited). The secret is
// hashed once per request for both checks. It may be combined with
// WithExempt: a request is exempt if either matches.
func WithInternalToken(t *InternalToken) Option {
	return func(c *config) error {
		if t == nil {
			return errors.New("addrlimit: WithInternalToken given a nil token")
		}
		c.token = t
		return nil
	}
}

// WithExempt sets a predicate for requests that bypass the limiter entirely:
// for them no key is computed, no bucket is touched or created, no quota
// header is set, and the Decision is Exempt. This is a bypass, so the
// predicate must be something a client cannot forge; for the internal token
// use WithInternalToken, for a verified client certificate VerifiedPeers.Match.
// It is called first, for every request, concurrently.
func WithExempt(f func(*http.Request) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithExempt given a nil function")
		}
		c.exempt = f
		return nil
	}
}

// WithDeniedHandler replaces the body and status of denied responses (by
// default 429 with a short plain-text body, 413 for a cost over the burst,
// or 503 when the store failed under FailClosed). When h runs, the quota fields, Retry-After (except for
// a cost over the burst, errors.Is(d.Err, ErrCostOverBurst): see WithCost)
// and Cache-Control are already set, and DecisionFromContext(r.Context()) returns
// the Decision. h must not reveal Decision.Err to the client.
func WithDeniedHandler(h http.Handler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("addrlimit: WithDeniedHandler given a nil handler")
		}
		c.denied = h
		return nil
	}
}

// WithMaxKeys bounds the number of exact buckets held in memory per policy
// (by the default in-memory store, or by the local fallback of a remote
// store). The default is DefaultMaxKeys. Past it, buckets move to a fixed-size
// approximate memory that never gives a key more than it had; see "Memory"
// in the README.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("addrlimit: max keys must be at least 1, got %d", n)
		}
		c.maxKeys = n
		return nil
	}
}

// WithObserver adds a function that is told every decision, exempt ones
// included, with its context (the request's, or Decide's and AllowKey's
// ctx): synchronously, before the response is written, in the order the
// observers were added. f is called concurrently and should be quick (log
// or count, no I/O); see LogObserver for a rate-limited logger.
func WithObserver(f func(context.Context, Decision)) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithObserver given a nil function")
		}
		c.observers = append(c.observers, f)
		return nil
	}
}

// WithDryRun makes the limiter decide, count, observe and set quota headers
// as usual, but never deny: a Limited decision has DryRun set and the request
// is served. Use it to learn who would be limited before enforcing.
func WithDryRun() Option {
	return func(c *config) error {
		c.dryRun = true
		return nil
	}
}

// WithStore sets where buckets are kept, for example a Redis store shared by
// a fleet of instances. The default keeps them in memory, bounded by
// WithMaxKeys.
func WithStore(s Store) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("addrlimit: WithStore given a nil Store")
		}
		c.store = s
		return nil
	}
}

// HeaderStyle selects the quota header fields of allowed and limited
// responses.
type HeaderStyle uint8

const (
	// HeaderDraft (the default) sends the IETF httpapi draft fields, with
	// the policy's name:
	//	RateLimit-Policy: "<name>";q=<burst>;w=<seconds to refill the burst>
	//	RateLimit: "<name>";r=<remaining>;t=<seconds until the next token, 0 while r > 0>
	// Both describe the bucket, whatever the request costs: q is the burst,
	// not the limit (60 per minute with a burst of 10 sends q=10;w=10), as
	// the draft's token-bucket mapping says; a denied response's Retry-After
	// describes the request (its wait for its cost).
	HeaderDraft HeaderStyle = iota
	// HeaderXRateLimit sends the de facto fields X-RateLimit-Limit (the burst),
	// X-RateLimit-Remaining, and X-RateLimit-Reset in seconds until the bucket
	// is full again (a delay, not a timestamp).
	HeaderXRateLimit
	// HeaderNone sends no quota fields. Denied responses still carry
	// Retry-After and Cache-Control: no-store.
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

// WithHeaders selects the quota header fields; the default is HeaderDraft.
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
	// FailLocal (the default) decides with a local in-memory bucket of the
	// same policy. Each local bucket continues from the state the store last
	// reported for its key, so a client the fleet had limited stays limited;
	// a key the store never reported starts full (so across N instances a
	// client new to the outage can get up to N budgets). The shared budget
	// applies again as soon as the store answers; a DebtStore is then
	// charged what the local bucket allowed meanwhile.
	FailLocal FailurePolicy = iota
	// FailOpen lets the request through unlimited.
	FailOpen
	// FailClosed denies the request: 503 Service Unavailable with Retry-After: 1.
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

// WithStoreFailure sets what happens when the Store returns an error; the
// default is FailLocal. A decision the failure policy took has Err and
// Degraded set; a cost over the burst is refused without a store call,
// whether the store works or not; a refund that fails is only counted
// (Stats.StoreErrors). No error text reaches the
// client. It needs WithStore (the in-memory buckets never fail): New
// refuses it without.
func WithStoreFailure(p FailurePolicy) Option {
	return func(c *config) error {
		if p > FailClosed {
			return fmt.Errorf("addrlimit: unknown failure policy %d", p)
		}
		c.failure, c.failSet = p, true
		return nil
	}
}

// WithClock sets the clock the Limiter's in-memory buckets read, instead of
// the system's: to decide in virtual time (replaying an access log, as
// cmd/addrlimit-replay does) or under a fake clock in tests. now is read once
// when New builds the Limiter (the buckets' epoch) and then once per
// decision, Peek, Reset and refund, concurrently; it must be safe for
// concurrent use and should not go back. A reading earlier than the latest
// one the buckets have seen counts as that latest one, so a clock that goes back
// never refills a bucket: buckets stand still until it passes the latest
// reading again. Readings before the first one count as the first, and
// readings are kept as a time.Duration since it, so they must stay within
// about 290 years of it.
//
// It governs the buckets of the default in-memory store and the local
// buckets of FailLocal; a Store given to WithStore keeps its own clock (the
// Redis store uses the server's), and LogObserver's one-line-per-interval
// suppression reads the system clock. Without WithClock, a decision reads
// the monotonic clock (time.Since).
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("addrlimit: WithClock given a nil function")
		}
		c.clock = now
		return nil
	}
}
