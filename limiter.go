// Package addrlimit is net/http middleware that limits each client address
// with a token bucket and lets your own services through by identity, not by
// address: an edge, an orchestrator or a gate that reaches your API from a
// few shared egress addresses is exempt by its internal bearer token, and
// everyone else keeps exactly the limit they had.
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
// This is the README's quick start. The constructors' errors name the
// misconfiguration, never a secret. What the package promises:
//
//   - Exemption is a bypass, by identity: a request that carries one of the
//     token's secrets (compared in constant time, see [InternalToken]) or
//     that [WithExempt] accepts touches no bucket and is never limited. A
//     wrong, forged or retired token gets no pass: it is charged like any
//     other request.
//   - Each key (by default the peer address from RemoteAddr, IPv6 grouped by
//     /64; behind proxies see [TrustedProxies.Key]) gets a bucket of burst
//     tokens (default: limit) refilled at limit per period: 300 per minute
//     means 300 at once, then one more every 200 ms. The decisions are those
//     of golang.org/x/time/rate's rate.NewLimiter(rate.Every(per/limit), burst).
//   - No error skips the limit: a request whose key, policy or cost is not
//     clean is charged to a fallback ([UnkeyedKey], the default policy, one
//     token) or refused, and [Decision].Err says why; a [Store] failure is
//     decided by the [FailurePolicy] you chose.
//   - Limited requests get 429 with Retry-After; counted responses carry
//     RateLimit and RateLimit-Policy fields ([HeaderStyle]; none under
//     HeaderNone, when the store failed under FailOpen or FailClosed, or on
//     the 413 of a cost over the burst, which no bucket was asked about).
//     The responses the package writes never echo a token, a key or an
//     error.
//   - Memory is bounded per policy ([WithMaxKeys]). Past the bound decisions
//     may limit more than the bucket would, never less: no key is handed a
//     fuller bucket than it had.
//
// The README covers the rest, with measurements: proxies, frameworks, gRPC,
// many instances (the redisstore module), rolling out with [WithDryRun],
// metrics (promcollector, otelcollector), memory and benchmarks.
package addrlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/headers"
)

// Limiter limits requests per key under one or more policies. Build it with
// New; it is immutable and safe for concurrent use, and starts no goroutine
// but one while it holds in-flight slots in a fleet store (an InFlightStore
// given to WithStore), which renews them and stops when none is held.
// A Limiter not built by New (the zero value, or a nil pointer) never lets a
// request through unlimited: Peek and Reset return the error "addrlimit:
// Limiter not built with New", every other method panics with it.
type Limiter struct {
	policies    []*policyState // [0] is the default policy
	byName      map[string]*policyState
	keyFunc     KeyFunc // nil: the peer address, formatted without allocating
	addrKeys    bool    // requests are keyed by AddrKey (keysByAddr): see namedKey
	selector    PolicySelector
	cost        func(*http.Request) int
	refund      func(int) bool
	exempt      func(*http.Request) bool
	token       *InternalToken
	denied      http.Handler
	observers   []func(context.Context, Decision)
	dryRun      bool
	inContext   bool // WithDecisionInContext
	waitQueue   int  // WithInFlightWait: requests that may wait per key; 0: none
	waitTimeout time.Duration
	store       seam  // memStore, or failover around the WithStore Store
	keys        keyer // the seam's: how keys are hashed, and whether it needs their strings

	exempted, credentialed, retiredLimited, keyErrors, storeErrors, refunded atomic.Uint64
	identities                                                               *identityCounters // per identity of token
}

// policyState is one policy with its buckets, its header fields and the
// counters of the decisions its table does not count itself.
type policyState struct {
	Policy                // with every limit named
	maxCost int           // the smallest Burst: the largest cost every limit can pay
	longest time.Duration // the longest full refill (Burst × Interval) of its limits
	table   *bucket.Table // the buckets, or the local fallback of a remote store
	slots   *slotTable    // the in-flight slots (InFlight > 0), or FailLocal's
	debts   debtRecord    // what the local fallback charged, owed to a DebtStore
	headers *headers.Writer
	allowed atomic.Uint64 // decisions of a remote store or of FailOpen/FailClosed
	limited atomic.Uint64
	// limitedBy counts the remote store's denials by the limit that denied
	// (the tightest: see Result).
	limitedBy [MaxLimits]atomic.Uint64
	// inFlightLimited counts the in-flight limit's refusals, and
	// inFlightOverAllowed those of them that the rate limits had allowed
	// (and counted so: Stats moves them to Limited).
	inFlightLimited, inFlightOverAllowed atomic.Uint64
}

// tau is the policy's longest full refill time in ns: after it, every
// bucket of a key that was not charged is full.
func (ps *policyState) tau() int64 { return int64(ps.longest) }

// DefaultMaxKeys is the default capacity of each policy's exact bucket table
// (WithMaxKeys). Refilled buckets are dropped, so the table holds only the
// clients seen within one full refill time (60 s for 300/min): this many is
// far beyond normal load. README "Memory" gives its cost.
const DefaultMaxKeys = 1 << 20

// New returns a Limiter whose default policy lets each key make limit
// requests per period per, in bursts of up to limit (see WithBurst). It
// validates everything once: limit >= 1, per > 0, at most one request per
// nanosecond, and every option; errors start with "addrlimit: ".
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
	def.InFlight = c.inFlight
	l := &Limiter{
		byName:      make(map[string]*policyState, 1+len(c.policies)),
		keyFunc:     c.keyFunc,
		addrKeys:    keysByAddr(c.keyFunc),
		selector:    c.selector,
		cost:        c.cost,
		refund:      c.refund,
		exempt:      c.exempt,
		token:       c.token,
		identities:  newIdentityCounters(c.token),
		denied:      c.denied,
		observers:   c.observers,
		dryRun:      c.dryRun,
		inContext:   c.decisionInContext,
		waitQueue:   c.waitQueue,
		waitTimeout: c.waitTimeout,
	}
	mem := newMemStore(c.maxKeys)
	if c.clock != nil {
		mem.clock, mem.epoch = c.clock, c.clock()
	}
	l.store = mem
	if c.store != nil {
		f := newFailover(c.store, c.failure, mem)
		is, ok := c.store.(InFlightStore)
		if ok && (def.InFlight > 0 || slices.ContainsFunc(c.policies, func(p Policy) bool { return p.InFlight > 0 })) {
			lt := is.LeaseTime()
			if lt <= 0 {
				return nil, fmt.Errorf("addrlimit: the store's LeaseTime must be positive, got %v", lt)
			}
			f.leases = newLeases(is, lt)
		}
		l.store = f
	}
	l.keys = l.store.keys()
	for _, p := range append([]Policy{def}, c.policies...) {
		p = p.named() // validated: by newPolicy or WithPolicy
		if _, dup := l.byName[p.Name]; dup {
			return nil, fmt.Errorf("addrlimit: two policies are named %q", p.Name)
		}
		if pc, ok := c.store.(PolicyChecker); ok {
			if err := pc.CheckPolicy(p); err != nil {
				return nil, fmt.Errorf("addrlimit: policy %q: the store refuses it: %w", p.Name, err)
			}
		}
		ps := mem.lane(p)
		if p.InFlight > 0 {
			ps.slots = newSlotTable(p.InFlight, c.maxKeys)
		}
		ps.headers = headers.NewMulti(uint8(c.headers), p.Name, p.headerLimits())
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

// Policies returns a copy of the limiter's policies: the default one first,
// then the named ones in the order of their WithPolicy options.
func (l *Limiter) Policies() []Policy {
	l.mustBeBuilt()
	out := make([]Policy, len(l.policies))
	for i, ps := range l.policies {
		out[i] = Policy{Name: ps.Name, Limits: slices.Clone(ps.Limits), InFlight: ps.InFlight}
	}
	return out
}

// Handler returns middleware that decides each request before next sees it.
// Exempt requests go straight to next, untouched. Counted requests get the
// quota header fields; a denied one gets 429 Too Many Requests with
// Retry-After (whole seconds, at least 1) and Cache-Control: no-store (413
// for a cost over the burst, see WithCost), or the WithDeniedHandler
// response. Under an in-flight limit (WithInFlight, Policy.InFlight) an
// allowed request holds its slot until next returns, however it returns
// (a panic included), and frees it once. It panics if next is nil. Without
// a net/http middleware slot (gin), use Allow, Respond, Refund and Release.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	l.mustBeBuilt()
	if next == nil {
		panic("addrlimit: Limiter.Handler called with a nil handler")
	}
	wantKey := len(l.observers) > 0 || l.denied != nil || l.inContext
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d Decision
		var s slot
		c := httpCall(r)
		ps, k := l.decide(r.Context(), &c, r, wantKey, &d, &s)
		if s.ps != nil {
			defer l.free(r.Context(), s)
		}
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
				l.refundCharge(context.WithoutCancel(r.Context()), ps, k, &d)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Allow decides r as Handler would and tells the observers, but writes
// nothing and never refunds: for websockets and frameworks without a
// net/http middleware slot (gin). Refuse the work when the Decision is
// Denied; Respond writes Handler's response, Refund gives the tokens back.
func (l *Limiter) Allow(r *http.Request) Decision {
	l.mustBeBuilt()
	var d Decision
	var s slot
	c := httpCall(r)
	_, k := l.decide(r.Context(), &c, r, true, &d, &s)
	d.Key = k.s
	d.keep(s)
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

// AllowKey charges n tokens to key under the named policy ("" for the
// default one) and tells the observers, as Decide does, for job queues and
// other work without a client: exemption does not apply, and ctx's
// cancellation does not reach the Store. Bad input never skips the limit:
// an unknown policy is charged to the default one (ErrUnknownPolicy), an
// empty key to UnkeyedKey (ErrEmptyKey), n < 1 as 1 (ErrInvalidCost); n
// above the burst is refused and charges nothing (ErrCostOverBurst).
//
// key shares one namespace per policy with the keys of requests (see
// PolicySelector). When requests are keyed by address (the default key,
// RemoteAddrKey or TrustedProxies.Key), a key written as an address in any
// form names that client's bucket, as Reset says: AllowKey(ctx, "",
// r.RemoteAddr, 1) charges r's bucket. Decision.Key is the bucket's key.
// Prefix other keys with a name that is not hexadecimal ("user:"+id).
// Under a policy with an in-flight limit, an allowed decision holds a slot
// until Release frees it.
func (l *Limiter) AllowKey(ctx context.Context, policy, key string, n int) Decision {
	l.mustBeBuilt()
	if k := l.namedKey(key); k != "" {
		key = k // a network of several clients is no client's: taken as it is
	}
	c := Call{Policy: policy, Cost: n}
	c.Key, c.Err = keyOrUnkeyed(key, nil)
	var d Decision
	var s slot
	_, k := l.decide(ctx, &c, nil, true, &d, &s)
	d.Key = k.s
	d.keep(s)
	l.observe(ctx, d)
	return d
}

// Peek returns the state of key's bucket under the named policy ("" for the
// default one) without charging it: Outcome is Allowed if a request of cost
// 1 would be allowed now, Limited otherwise, and Key is the bucket's key.
// Nothing is counted or observed. key names a bucket as for Reset. It fails
// for an unknown policy (ErrUnknownPolicy), an empty key (ErrEmptyKey), a
// network of several clients, or when the Store fails (its error; no failure
// policy applies).
func (l *Limiter) Peek(ctx context.Context, policy, key string) (Decision, error) {
	ps, key, err := l.keyedPolicy(policy, key)
	if err != nil {
		return Decision{}, err
	}
	a := l.store.peek(ctx, ps, l.keys.of(key))
	if a.err != nil {
		return Decision{}, a.err
	}
	var d Decision
	d.record(ps, &a)
	d.Key = key
	return d, nil
}

// Reset makes key's bucket under the named policy ("" for the default one)
// full again, as if the client had never been seen: for support staff who
// unblock a customer. Resetting a key that has no bucket is not an error.
//
// When requests are keyed by address (the default key, RemoteAddrKey or
// TrustedProxies.Key), key may be the client's address as people type it:
// in any notation ("2001:db8::1" in the client's /64, "::ffff:192.0.2.1",
// "64:ff9b::c000:201", a zone), with a port ("[2001:db8::1]:443"), or a
// network inside one client's key ("2001:db8::1/64"). Under any other
// KeyFunc (even one wrapping these), key is taken as it is.
//
// It fails for an unknown policy, an empty key, a network of several
// clients, or when the Store fails (the local fallback bucket is reset
// either way).
func (l *Limiter) Reset(ctx context.Context, policy, key string) error {
	ps, key, err := l.keyedPolicy(policy, key)
	if err != nil {
		return err
	}
	return l.store.reset(ctx, ps, l.keys.of(key))
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
