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
// This is the README's quick start; the README and docs/ cover the rest. The
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/store"
)

// Limiter limits requests per key under one or more policies. Build it with
// New; it is safe for concurrent use, starts no goroutine (but one renewing
// in-flight leases while it holds any), and changes only by SetPolicies. One
// not built by New lets nothing through: Peek and Reset fail, the rest panic.
type Limiter struct {
	pols        atomic.Pointer[policySet] // read once per decision; SetPolicies replaces it
	keyFunc     KeyFunc                   // nil: the peer address, formatted without allocating
	addrKeys    bool                      // requests are keyed by AddrKey (keysByAddr): see namedKey
	selector    PolicySelector
	cost        func(*http.Request) int
	refund      func(int) bool
	exempt      func(*http.Request) bool
	token       *InternalToken
	denied      http.Handler
	observers   []func(context.Context, Decision)
	dryRun      bool
	inContext   bool                // WithDecisionInContext
	waitQueue   int                 // WithInFlightWait: requests that may wait per key; 0: none
	waitTimeout time.Duration       // WithInFlightWait's timeout
	store       seam                // memStore, or failover around the WithStore Store
	keys        keyer               // the seam's: how keys are hashed, and whether it needs their strings
	mem         *memStore           // the tables (failover's local ones with a Store)
	checker     store.PolicyChecker // WithStore's Store, if it checks policies
	headers     HeaderStyle
	reconf      sync.Mutex // serialises SetPolicies

	exempted, credentialed, retiredLimited, keyErrors, storeErrors, refunded atomic.Uint64
	identities                                                               atomic.Pointer[identityCounters] // per identity of token's current secrets
	identityMu                                                               sync.Mutex                       // serialises recount
}

// policyState is a policy as the Limiter uses it: the store's half, its
// lane (the named policy, its limits' arithmetic, the tables, debts and
// counters, which the seam owns), and the Limiter's own, the header writer
// of its quota fields.
type policyState struct {
	*lane
	headers *headers.Writer
	// next is the state that took over this one's buckets when SetPolicies
	// changed the policy's limits: its lane is the lane's successor.
	next atomic.Pointer[policyState]
}

// holding returns the state, ps or one that took over from it, whose lane
// is ln: the lane that answered a call made on ps's lane.
func (ps *policyState) holding(ln *lane) *policyState {
	for ps.lane != ln {
		ps = ps.next.Load()
	}
	return ps
}

// leadsTo reports whether cur is ps or took over from it.
func (ps *policyState) leadsTo(cur *policyState) bool {
	for ; ps != nil; ps = ps.next.Load() {
		if ps == cur {
			return true
		}
	}
	return false
}

// policySet is a Limiter's policies, immutable: SetPolicies replaces it as
// a whole, and a decision reads it once, so it sees one set or the other.
type policySet struct {
	list   []*policyState // [0] is the default policy
	byName map[string]*policyState
}

// DefaultMaxKeys is WithMaxKeys's default, far beyond normal load
// (docs/memory.md).
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
	def.InFlight = c.inFlight
	l := &Limiter{
		keyFunc:     c.keyFunc,
		addrKeys:    keysByAddr(c.keyFunc),
		selector:    c.selector,
		cost:        c.cost,
		refund:      c.refund,
		exempt:      c.exempt,
		token:       c.token,
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
		// Leases even without an in-flight policy yet: SetPolicies may add
		// one. The renewing goroutine runs only while leases are held.
		if is, ok := c.store.(store.InFlightStore); ok {
			lt := is.LeaseTime()
			if lt <= 0 {
				return nil, fmt.Errorf("addrlimit: the store's LeaseTime must be positive, got %v", lt)
			}
			f.leases = newLeases(is, lt)
		}
		l.store = f
	}
	l.keys = l.store.keys()
	l.mem, l.headers = mem, c.headers
	var ts *tokenSecrets
	if c.token != nil {
		ts = c.token.load()
	}
	l.identities.Store(newIdentityCounters(ts, nil))
	l.checker, _ = c.store.(store.PolicyChecker)
	ps := append([]Policy{def}, c.policies...) // validated: by newPolicy or WithPolicy
	if err := l.checkPolicies(ps); err != nil {
		return nil, err
	}
	l.pols.Store(l.buildPolicies(ps, nil))
	return l, nil
}

// SetPolicies replaces the policies while the Limiter runs (policies[0] the
// default one), atomically: each decision sees the old set or the new one.
// An invalid set is refused with an error naming the policy, and nothing
// changes. Buckets keep the tokens they spent, up to the new burst (250 of
// 300 spent: 150 left at 400, none at 100); limits pair by name, then in
// order; added ones start full, removed ones drop their buckets; redisstore
// starts a changed policy full (docs/reload.md).
func (l *Limiter) SetPolicies(policies ...Policy) error {
	l.mustBeBuilt()
	if len(policies) == 0 {
		return errors.New("addrlimit: SetPolicies needs at least the default policy")
	}
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	if len(policies[0].Limits) == 0 {
		return fmt.Errorf("addrlimit: the default policy %q needs a rate limit", policies[0].Name)
	}
	full := make([]Policy, len(policies))
	for i, p := range policies {
		full[i] = named(p)
	}
	if err := l.checkPolicies(full); err != nil {
		return err
	}
	l.reconf.Lock()
	defer l.reconf.Unlock()
	old := l.pols.Load()
	set := l.buildPolicies(full, old)
	l.pols.Store(set)
	now := l.mem.now()
	for _, ps := range set.list {
		if ps.table != nil {
			ps.table.Settle(now)
		}
	}
	for _, ps := range old.list {
		if set.byName[ps.Name] != ps {
			l.mem.drop(ps.lane)
		}
	}
	return nil
}

// checkPolicies checks what a policy set needs beyond each policy's
// validity, which the caller checked: distinct names, and the store's
// consent.
func (l *Limiter) checkPolicies(ps []Policy) error {
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		if seen[p.Name] {
			return fmt.Errorf("addrlimit: two policies are named %q", p.Name)
		}
		seen[p.Name] = true
		if l.checker != nil {
			if err := l.checker.CheckPolicy(named(p)); err != nil {
				return fmt.Errorf("addrlimit: policy %q: the store refuses it: %w", p.Name, err)
			}
		}
	}
	return nil
}

// buildPolicies returns the set of the checked policies ps, taking over the
// buckets of old's (nil in New) by SetPolicies' rule. A state whose table
// takes over another's is linked from it (next) before the set is
// published, so that a call on the old table finds its successor.
func (l *Limiter) buildPolicies(ps []Policy, old *policySet) *policySet {
	set := &policySet{byName: make(map[string]*policyState, len(ps))}
	for i, p := range ps {
		p = named(p)
		var prev *policyState
		switch {
		case old == nil:
		case i == 0:
			prev = old.list[0]
		case old.byName[p.Name] != old.list[0]:
			prev = old.byName[p.Name] // nil for a new name
		}
		var st *policyState
		switch {
		case prev != nil && policyID(prev.Policy) == policyID(p) && prev.InFlight == p.InFlight:
			st = prev
		case prev != nil:
			st = &policyState{lane: l.mem.successor(prev.lane, p, inheritance(prev.Policy, p))}
			// Linked before the set is published: no call reaches the
			// successor's table, so none is forwarded to it, until then.
			prev.next.Store(st)
			prev.lane.next.Store(st.lane)
		default:
			st = &policyState{lane: l.mem.lane(p)}
		}
		if st.headers == nil {
			st.headers = headers.NewMulti(uint8(l.headers), p.Name, headerLimits(p))
		}
		set.list = append(set.list, st)
		set.byName[p.Name] = st
	}
	return set
}

// inheritance says which limit of old each limit of p takes over (-1:
// none), by SetPolicies' rule: by name, then the rest in order.
func inheritance(old, p Policy) []int {
	from := make([]int, len(p.Limits))
	used := make([]bool, len(old.Limits))
	for j, lim := range p.Limits {
		from[j] = -1
		for i, o := range old.Limits {
			if !used[i] && o.Name == lim.Name {
				from[j], used[i] = i, true
				break
			}
		}
	}
	i := 0
	for j := range from {
		for ; from[j] < 0 && i < len(used); i++ {
			if !used[i] {
				from[j], used[i] = i, true
			}
		}
	}
	return from
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

// Policies returns a copy of the policies: the default one first, then the
// named ones in the order of their WithPolicy options (or of the last
// SetPolicies).
func (l *Limiter) Policies() []Policy {
	l.mustBeBuilt()
	set := l.pols.Load()
	out := make([]Policy, len(set.list))
	for i, ps := range set.list {
		out[i] = Policy{Name: ps.Name, Limits: slices.Clone(ps.Limits), InFlight: ps.InFlight}
	}
	return out
}

// Handler returns middleware deciding each request before next (nil panics):
// exempt ones pass untouched, counted ones get the quota fields, denied ones
// 429 with Retry-After and Cache-Control: no-store (or WithDeniedHandler's).
// An in-flight slot is held until next returns, however it returns.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	l.mustBeBuilt()
	if next == nil {
		panic("addrlimit: Limiter.Handler called with a nil handler")
	}
	wantKey := len(l.observers) > 0 || l.denied != nil || l.inContext
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d Decision
		var c Call
		var s slot
		httpCall(r, &c)
		ps, k := l.decide(r.Context(), &c, r, wantKey, &d, &s)
		if s.ln != nil {
			defer l.free(r.Context(), s)
		}
		if wantKey {
			d.Key = k.s
		}
		l.observe(r.Context(), &d)
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

// Allow decides r as Handler would and tells the observers, but writes and
// refunds nothing (websockets, gin): refuse a Denied decision; Respond writes
// Handler's response, Refund and Release give tokens and slot back.
func (l *Limiter) Allow(r *http.Request) Decision {
	l.mustBeBuilt()
	var d Decision
	var c Call
	var s slot
	httpCall(r, &c)
	_, k := l.decide(r.Context(), &c, r, true, &d, &s)
	d.Key = k.s
	l.keep(&d, s)
	l.observe(r.Context(), &d)
	return d
}

// httpCall sets c, a zero Call of the caller's (filled in place: a Call
// returned and copied stalls on store forwarding), to what an HTTP request
// says of itself before the Limiter's HTTP rules (describe) apply: its
// Authorization lines, and its URL path as the route (a ServeMux pattern
// would hide the path under a catch-all "/").
func httpCall(r *http.Request, c *Call) {
	c.Authorization = r.Header["Authorization"]
	if r.URL != nil {
		c.Route = r.URL.Path
	}
}

// AllowKey decides a call of cost n on key under the named policy ("" for the
// default) as Decide does, for work without a client; key names a bucket as
// for Reset. Release an in-flight slot it holds.
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
	l.keep(&d, s)
	l.observe(ctx, &d)
	return d
}

// Peek returns key's buckets under the named policy, uncharged (Allowed if a
// call of cost 1 would be); it fails for an unknown policy, an empty key, a
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
	if a.lane != nil {
		ps = ps.holding(a.lane) // SetPolicies replaced ps meanwhile
	}
	var d Decision
	d.record(ps, &a)
	d.Key = key
	return d, nil
}

// Reset fills key's buckets under the named policy ("" for the default). With
// an address KeyFunc, key may be the client's address in any notation, with a
// port, or a network within its key. It fails as Peek does.
func (l *Limiter) Reset(ctx context.Context, policy, key string) error {
	ps, key, err := l.keyedPolicy(policy, key)
	if err != nil {
		return err
	}
	return l.store.reset(ctx, ps.lane, l.keys.of(key))
}

// lookupPolicy returns the named policy, or the default one and
// ErrUnknownPolicy.
func (s *policySet) lookupPolicy(name string) (*policyState, error) {
	if name == "" {
		return s.list[0], nil
	}
	if ps := s.byName[name]; ps != nil {
		return ps, nil
	}
	return s.list[0], fmt.Errorf("%w %q", ErrUnknownPolicy, truncate(name, maxPolicyName))
}

// errNotBuilt is what a Limiter not built by New reports.
var errNotBuilt = errors.New("addrlimit: Limiter not built with New")

// mustBeBuilt panics with errNotBuilt unless l was built by New: a
// misconfigured limiter must fail loudly, never limit nothing.
func (l *Limiter) mustBeBuilt() {
	if l == nil || l.pols.Load() == nil {
		panic(errNotBuilt)
	}
}

// keyedPolicy validates the arguments of Peek and Reset and returns the
// policy and the key of the bucket that key names (namedKey).
func (l *Limiter) keyedPolicy(policy, key string) (*policyState, string, error) {
	if l == nil || l.pols.Load() == nil {
		return nil, "", errNotBuilt
	}
	ps, err := l.pols.Load().lookupPolicy(policy)
	if err != nil {
		return nil, "", err
	}
	if key == "" {
		return nil, "", ErrEmptyKey
	}
	if ps.table == nil {
		return nil, "", fmt.Errorf("addrlimit: policy %q has no rate limit: no buckets", ps.Name)
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

// observe tells the observers about d, decided in ctx. d goes by pointer:
// the copy of a Decision by value, made even when there is no observer, was
// a measurable part of an allowed request.
func (l *Limiter) observe(ctx context.Context, d *Decision) {
	for _, f := range l.observers {
		f(ctx, *d)
	}
}
