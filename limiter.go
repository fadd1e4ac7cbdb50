// Package addrlimit is net/http middleware that limits each client address
// with a token bucket and lets your own services through by identity (an
// internal bearer token, a verified client certificate), not by address.
//
//	tok, err := addrlimit.NewInternalToken(os.Getenv("INTERNAL_TOKEN")) // one or more secrets (rotation)
//	if err != nil {
//		log.Fatal(err) // says which secret is wrong and why, never what it is
//	}
//	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithInternalToken(tok)) // 300/min per address
//	if err != nil {
//		log.Fatal(err)
//	}
//	internalRoutes := http.NewServeMux() // your service-to-service API
//	mux := http.NewServeMux()
//	mux.Handle("/internal/", tok.Require(internalRoutes)) // the same check guards internal routes (401)
//	mux.Handle("/", http.FileServer(http.Dir("public")))  // everything else
//	log.Fatal(http.ListenAndServe(":8080", lim.Handler(mux)))
//
// This is the README's quick start; the README covers the rest. The
// promises: exemption is by identity only (a wrong, forged or retired token
// is charged like any other request); one limit decides as x/time/rate's
// rate.NewLimiter(rate.Every(per/limit), burst); no error skips the limit
// (what is not clean is charged to a fallback or refused, and reported in
// Decision.Err, never to the client); memory is bounded (WithMaxKeys) and a
// key past the bound may be limited more, never less.
package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/store"
)

// Limiter limits requests per key under one or more policies. Build it with
// New; it is immutable, safe for concurrent use, and starts no goroutine. A
// Limiter not built by New never lets a request through: Peek and Reset return
// an error, the other methods panic.
type Limiter struct {
	policies  []*policyState // [0] is the default policy
	byName    map[string]*policyState
	keyFunc   KeyFunc // nil: the peer address, formatted without allocating
	addrKeys  bool    // requests are keyed by AddrKey (keysByAddr): see namedKey
	selector  PolicySelector
	cost      func(*http.Request) int
	refund    func(int) bool
	exempt    func(*http.Request) bool
	token     *InternalToken
	denied    http.Handler
	observers []func(context.Context, Decision)
	dryRun    bool
	inContext bool  // WithDecisionInContext
	store     seam  // memStore, or failover around the WithStore Store
	keys      keyer // the seam's: how keys are hashed, and whether it needs their strings

	exempted, credentialed, retiredLimited, keyErrors, storeErrors, refunded atomic.Uint64
	identities                                                               *identityCounters // per identity of token
}

// policyState is a policy as the Limiter uses it: the store's half, its
// lane (the named policy, its limits' arithmetic, the tables, debts and
// counters, which the seam owns), and the Limiter's own, the header writer
// of its quota fields.
type policyState struct {
	*lane
	headers *headers.Writer
}

// DefaultMaxKeys is WithMaxKeys's default, far beyond normal load (README
// "Memory").
const DefaultMaxKeys = 1 << 20

// New returns a Limiter whose default policy lets each key make limit requests
// per period per, in bursts of up to limit. It validates every option once;
// errors start with "addrlimit: ".
func New(limit int, per time.Duration, opts ...Option) (*Limiter, error) {
	c := config{name: DefaultPolicyName, burst: limit, maxKeys: DefaultMaxKeys}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("addrlimit: option %d is nil", i+1)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.failSet && c.store == nil {
		return nil, errors.New("addrlimit: WithStoreFailure needs WithStore")
	}
	def, err := newPolicy(c.name, limit, c.burst, per, c.limits)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		byName:     make(map[string]*policyState, 1+len(c.policies)),
		keyFunc:    c.keyFunc,
		addrKeys:   keysByAddr(c.keyFunc),
		selector:   c.selector,
		cost:       c.cost,
		refund:     c.refund,
		exempt:     c.exempt,
		token:      c.token,
		identities: newIdentityCounters(c.token),
		denied:     c.denied,
		observers:  c.observers,
		dryRun:     c.dryRun,
		inContext:  c.decisionInContext,
	}
	mem := newMemStore(c.maxKeys)
	if c.clock != nil {
		mem.clock, mem.epoch = c.clock, c.clock()
	}
	l.store = mem
	if c.store != nil {
		l.store = newFailover(c.store, c.failure, mem)
	}
	l.keys = l.store.keys()
	for _, p := range append([]Policy{def}, c.policies...) {
		p = named(p) // validated: by newPolicy or WithPolicy
		if _, dup := l.byName[p.Name]; dup {
			return nil, fmt.Errorf("addrlimit: two policies are named %q", p.Name)
		}
		if pc, ok := c.store.(store.PolicyChecker); ok {
			if err := pc.CheckPolicy(p); err != nil {
				return nil, fmt.Errorf("addrlimit: policy %q: the store refuses it: %w", p.Name, err)
			}
		}
		ps := &policyState{lane: mem.lane(p), headers: headers.NewMulti(uint8(c.headers), p.Name, headerLimits(p))}
		l.policies = append(l.policies, ps)
		l.byName[p.Name] = ps
	}
	return l, nil
}

// newPolicy validates and builds the policy of limit requests per per in
// bursts of burst, and the further limits more.
func newPolicy(name string, limit, burst int, per time.Duration, more []Limit) (Policy, error) {
	interval, err := limitInterval(limit, per)
	if err != nil {
		return Policy{}, fmt.Errorf("addrlimit: policy %q: %w", name, err)
	}
	p := Policy{Name: name, Limits: append([]Limit{{Burst: burst, Interval: interval}}, more...)}
	return p, p.Validate()
}

// limitInterval is the refill interval of limit requests per per.
func limitInterval(limit int, per time.Duration) (time.Duration, error) {
	if limit < 1 {
		return 0, fmt.Errorf("limit must be at least 1, got %d", limit)
	}
	if per <= 0 {
		return 0, fmt.Errorf("period must be positive, got %v", per)
	}
	interval := per / time.Duration(limit)
	if interval < 1 {
		return 0, fmt.Errorf("%d per %v is more than one request per nanosecond", limit, per)
	}
	return interval, nil
}

// Policies returns a copy of the policies: the default one, then those of
// WithPolicy in order.
func (l *Limiter) Policies() []Policy {
	l.mustBeBuilt()
	out := make([]Policy, len(l.policies))
	for i, ps := range l.policies {
		out[i] = Policy{Name: ps.Name, Limits: slices.Clone(ps.Limits)}
	}
	return out
}

// Handler returns middleware deciding each request before next (nil panics):
// exempt ones pass untouched, counted ones get the quota fields, denied ones
// 429 with Retry-After and Cache-Control: no-store (or WithDeniedHandler's).
func (l *Limiter) Handler(next http.Handler) http.Handler {
	l.mustBeBuilt()
	if next == nil {
		panic("addrlimit: Limiter.Handler called with a nil handler")
	}
	wantKey := len(l.observers) > 0 || l.denied != nil || l.inContext
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d Decision
		c := httpCall(r)
		ps, k := l.decide(r.Context(), &c, r, wantKey, &d)
		if wantKey {
			d.Key = k.s
		}
		l.observe(r.Context(), d)
		if d.Outcome == Exempt {
			next.ServeHTTP(w, r)
			return
		}
		if l.write(w, r, ps, &d) {
			return
		}
		if l.inContext {
			r = r.WithContext(ContextWithDecision(r.Context(), d))
		}
		if l.refund != nil && d.Outcome == Allowed {
			rw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(rw, r)
			if status, seen := rw.status(); seen && l.refund(status) {
				l.refundCharge(r.Context(), ps, k, &d)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Allow decides r as Handler would and tells the observers, but writes nothing
// and never refunds: for websockets and frameworks without a middleware slot
// (gin). Refuse a Denied decision; Respond writes Handler's response, Refund
// gives the tokens back.
func (l *Limiter) Allow(r *http.Request) Decision {
	l.mustBeBuilt()
	var d Decision
	c := httpCall(r)
	_, k := l.decide(r.Context(), &c, r, true, &d)
	d.Key = k.s
	l.observe(r.Context(), d)
	return d
}

// httpCall is what an HTTP request says of itself before the Limiter's HTTP
// rules (describe) apply: its Authorization lines, and its URL path as the
// route (a ServeMux pattern would hide the path under a catch-all "/").
func httpCall(r *http.Request) Call {
	c := Call{Authorization: r.Header["Authorization"]}
	if r.URL != nil {
		c.Route = r.URL.Path
	}
	return c
}

// AllowKey decides a call of cost n on key under the named policy ("" for the
// default), as Decide does, for work without a client; key names a bucket as
// for Reset.
func (l *Limiter) AllowKey(ctx context.Context, policy, key string, n int) Decision {
	l.mustBeBuilt()
	if k := l.namedKey(key); k != "" {
		key = k // a network of several clients is no client's: taken as it is
	}
	c := Call{Policy: policy, Cost: n}
	c.Key, c.Err = keyOrUnkeyed(key, nil)
	var d Decision
	_, k := l.decide(ctx, &c, nil, true, &d)
	d.Key = k.s
	l.observe(ctx, d)
	return d
}

// Peek returns key's buckets under the named policy, uncharged: Allowed if a
// call of cost 1 would be. It fails for an unknown policy, an empty key, a
// network of several clients, or the Store's error.
func (l *Limiter) Peek(ctx context.Context, policy, key string) (Decision, error) {
	ps, key, err := l.keyedPolicy(policy, key)
	if err != nil {
		return Decision{}, err
	}
	a := l.store.peek(ctx, ps.lane, l.keys.of(key))
	if a.err != nil {
		return Decision{}, a.err
	}
	var d Decision
	d.record(ps, &a)
	d.Key = key
	return d, nil
}

// Reset makes key's buckets under the named policy ("" for the default) full.
// Under an address KeyFunc (the default, RemoteAddrKey, TrustedProxies.Key),
// key may be the client's address in any notation, with a port, or a network
// within its key. It fails as Peek does.
func (l *Limiter) Reset(ctx context.Context, policy, key string) error {
	ps, key, err := l.keyedPolicy(policy, key)
	if err != nil {
		return err
	}
	return l.store.reset(ctx, ps.lane, l.keys.of(key))
}

// lookupPolicy returns the named policy, or the default one and
// ErrUnknownPolicy.
func (l *Limiter) lookupPolicy(name string) (*policyState, error) {
	if name == "" {
		return l.policies[0], nil
	}
	if ps := l.byName[name]; ps != nil {
		return ps, nil
	}
	return l.policies[0], fmt.Errorf("%w %q", ErrUnknownPolicy, truncate(name, maxPolicyName))
}

// errNotBuilt is what a Limiter not built by New reports.
var errNotBuilt = errors.New("addrlimit: Limiter not built with New")

// mustBeBuilt panics with errNotBuilt unless l was built by New: a
// misconfigured limiter must fail loudly, never limit nothing.
func (l *Limiter) mustBeBuilt() {
	if l == nil || len(l.policies) == 0 {
		panic(errNotBuilt)
	}
}

// keyedPolicy validates the arguments of Peek and Reset and returns the
// policy and the key of the bucket that key names (namedKey).
func (l *Limiter) keyedPolicy(policy, key string) (*policyState, string, error) {
	if l == nil || len(l.policies) == 0 {
		return nil, "", errNotBuilt
	}
	ps, err := l.lookupPolicy(policy)
	if err != nil {
		return nil, "", err
	}
	if key == "" {
		return nil, "", ErrEmptyKey
	}
	if k := l.namedKey(key); k != key {
		if k == "" {
			return nil, "", errSeveralClients
		}
		key = k
	}
	return ps, key, nil
}

// errSeveralClients is what Peek and Reset report for a network that holds
// several clients' buckets.
var errSeveralClients = errors.New("addrlimit: the key is a network of several clients' buckets (an IPv4 address or an IPv6 /64 each); name one address")

// namedKey is the key of the bucket that key names in AllowKey, Peek and
// Reset: when requests are keyed by address and key is written as an
// address or a network (addrKeyOf), its AddrKey, or "" for a network of
// several clients; else key as it is.
func (l *Limiter) namedKey(key string) string {
	if !l.addrKeys {
		return key
	}
	if k, ok := addrKeyOf(key); ok {
		return k
	}
	return key
}

// observe tells the observers about d, decided in ctx.
func (l *Limiter) observe(ctx context.Context, d Decision) {
	for _, f := range l.observers {
		f(ctx, d)
	}
}
