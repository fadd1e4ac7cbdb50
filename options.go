package addrlimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// An Option configures a Limiter in New. Options are applied in order; New
// reports the first invalid one.
type Option func(*config) error

type config struct {
	burst     int
	keyFunc   KeyFunc
	exempt    func(*http.Request) bool
	denied    http.Handler
	maxKeys   int
	observers []func(*http.Request, Decision)
	dryRun    bool
	store     Store
	headers   HeaderStyle
	failure   FailurePolicy
}

// WithBurst sets the bucket capacity: how many requests a client with a full
// bucket may make at once. The default is the limit passed to New. n must be
// at least 1.
func WithBurst(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("addrlimit: burst must be at least 1, got %d", n)
		}
		c.burst = n
		return nil
	}
}

// WithKeyFunc sets how requests map to buckets. The default, RemoteAddrKey,
// keys by the connection's peer address; behind proxies use TrustedProxyKey.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("addrlimit: WithKeyFunc given a nil KeyFunc")
		}
		c.keyFunc = f
		return nil
	}
}

// WithExempt sets a predicate for requests that bypass the limiter entirely:
// for them no key is computed, no bucket is touched or created, no quota
// header is set, and the Decision is Exempt. This is a bypass, so the
// predicate must be something a client cannot forge, such as
// (*InternalToken).Match. It is called first, for every request, concurrently.
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
// default 429 with a short plain-text body, or 503 when the store failed
// under FailClosed). When h runs, the quota fields, Retry-After and
// Cache-Control are already set, and DecisionFromContext(r.Context()) returns
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

// WithMaxKeys bounds the number of buckets held by the in-memory store (the
// default store, or the local fallback of a remote store under FailLocal).
// The default is DefaultMaxKeys. See MemoryStore for what happens at the cap.
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
// included: synchronously, once per request, before the response is written.
// Observers run in the order they were added; each call of WithObserver adds
// one. f is called concurrently and should be quick (log or count, no I/O on
// the request path); see LogObserver for a rate-limited logger.
func WithObserver(f func(*http.Request, Decision)) Option {
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
// a fleet of instances. The default is a MemoryStore of WithMaxKeys buckets.
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
	// HeaderDraft (the default) sends the IETF httpapi draft fields:
	//	RateLimit-Policy: "default";q=<burst>;w=<seconds to refill the burst>
	//	RateLimit: "default";r=<remaining>;t=<seconds until the next token, 0 while r > 0>
	HeaderDraft HeaderStyle = iota
	// HeaderXRateLimit sends the de facto fields X-RateLimit-Limit (the burst),
	// X-RateLimit-Remaining, and X-RateLimit-Reset in seconds until the bucket
	// is full again (a delay, not a timestamp).
	HeaderXRateLimit
	// HeaderNone sends no quota fields. Denied responses still carry
	// Retry-After and Cache-Control: no-store.
	HeaderNone
)

func (s HeaderStyle) internal() (headers.Style, bool) {
	switch s {
	case HeaderDraft:
		return headers.Draft, true
	case HeaderXRateLimit:
		return headers.XRateLimit, true
	case HeaderNone:
		return headers.None, true
	}
	return 0, false
}

// WithHeaders selects the quota header fields; the default is HeaderDraft.
func WithHeaders(s HeaderStyle) Option {
	return func(c *config) error {
		if _, ok := s.internal(); !ok {
			return fmt.Errorf("addrlimit: unknown header style %d", s)
		}
		c.headers = s
		return nil
	}
}

// FailurePolicy says what a Limiter does when its Store returns an error.
type FailurePolicy uint8

const (
	// FailLocal (the default) decides with a local in-memory bucket of the same
	// policy: clients stay limited, per instance, while the store is down, and
	// the shared budget applies again as soon as the store answers.
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
// default is FailLocal. Either way the Decision has Err and Degraded set, so
// observers see every failure; no error text reaches the client.
func WithStoreFailure(p FailurePolicy) Option {
	return func(c *config) error {
		if p > FailClosed {
			return fmt.Errorf("addrlimit: unknown failure policy %d", p)
		}
		c.failure = p
		return nil
	}
}
