package addrlimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/store"
)

// decide is the one path of every call (Handler, Allow, Decide, AllowKey):
// the exemption (the internal token on c.Authorization, and for an HTTP
// request r, WithExempt), then for r the Limiter's HTTP rules (describe),
// then the policy, the key and the charge, into *d, a zero Decision of the
// caller's. The key's string is built only if str is set or the seam needs
// it. *d is an out-parameter because a Decision returned by value from
// decide, charge and refuseCost measured slower on BenchmarkDeniedOptions
// and BenchmarkAllowed10k (see internal/DESIGN.md). A request that the
// policy's in-flight limit admits gets its slot in *s, unless s is nil (a
// call that takes none).
func (l *Limiter) decide(ctx context.Context, c *Call, r *http.Request, str bool, d *Decision, s *slot) (*policyState, bucketKey) {
	d.Route = c.Route
	class, ids, id := l.exemption(c.Authorization, c.Exempt, r, d)
	if d.Outcome == Exempt {
		return nil, bucketKey{}
	}
	var ps *policyState
	var err error
	if r != nil {
		ps = l.describe(r, c)
	} else {
		ps, err = l.pols.Load().lookupPolicy(c.Policy)
	}
	k, keyErr := l.callKey(c, str)
	ps = l.charge(ctx, ps, k, c.Cost, join(join(err, c.Err), keyErr), d, s)
	d.RetiredToken = class == tokenRetired
	d.Credentialed = len(c.Authorization) > 0
	if d.Outcome == Limited {
		if d.Credentialed {
			l.credentialed.Add(1)
		}
		if d.RetiredToken {
			l.retiredLimited.Add(1)
			ids.count(ids.retired, id)
		}
	}
	if d.RetiredToken {
		d.Identity = ids.name(id)
	}
	return ps, k
}

// join is errors.Join for the common case of at most one error, which it
// returns as it is (errors.Join is not free).
func join(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return errors.Join(a, b)
}

// exemption classifies the bearer token of the Authorization values, and
// returns its class, the identity counters and its identity among them. If
// the call is exempt (an accepted secret, the adapter's rule, or WithExempt
// for an HTTP request r), it counts it (per identity for an accepted
// secret, naming it in d) and sets d.Outcome to Exempt.
func (l *Limiter) exemption(authorization []string, exempt bool, r *http.Request, d *Decision) (tokenClass, *identityCounters, int) {
	class, id := tokenNone, 0
	var ids *identityCounters
	if l.token != nil {
		var ts *tokenSecrets
		class, id, ts = l.token.classify(authorization)
		if class != tokenNone {
			ids, id = l.identitiesOf(ts, id)
		}
	}
	if class == tokenAccepted {
		ids.count(ids.exempt, id)
		d.Identity = ids.name(id)
	}
	if class == tokenAccepted || exempt || r != nil && l.exempt != nil && l.exempt(r) {
		l.exempted.Add(1)
		d.Outcome = Exempt
	}
	return class, ids, id
}

// describe applies the Limiter's HTTP rules to r, a request that is not
// exempt: it sets c's key (the PolicySelector's, else the KeyFunc's, else
// the peer address as c.Addr), its cost (WithCost) and c.Err, and returns
// the policy (the PolicySelector's). Errors never skip the limit: they fall
// back to the default policy, the KeyFunc's key or UnkeyedKey.
func (l *Limiter) describe(r *http.Request, c *Call) *policyState {
	set := l.pols.Load()
	ps := set.list[0]
	if l.selector != nil {
		name, key, err := l.selector(r)
		if err == nil {
			ps, err = set.lookupPolicy(name) // "" is the default policy
		}
		if err == nil && key != "" {
			c.Key = key
		}
		c.Err = err
	}
	if c.Key == "" {
		if l.keyFunc == nil {
			c.Addr, _ = peerAddr(r) // the zero Addr: callKey reports ErrNoClientAddress
		} else {
			s, err := l.keyFunc(r)
			c.Key, err = keyOrUnkeyed(s, err)
			c.Err = join(c.Err, err)
		}
	}
	c.Cost = 1
	if l.cost != nil {
		c.Cost = l.cost(r)
	}
	return ps
}

// callKey is c's bucket key: c.Key, else the AddrKey of c.Addr, formatted
// on the stack and hashed, and copied to a string only if str is set or
// the seam needs it. That saves the default path an allocation
// (BenchmarkAllowed/lib=addrlimit of the benchmarks module, 0 allocs/op,
// against BenchmarkAllowedOptions/keyfunc=RemoteAddrKey, the same key as a
// string: 1). Without either it is UnkeyedKey, with ErrNoClientAddress
// unless c.Err already reports it.
func (l *Limiter) callKey(c *Call, str bool) (bucketKey, error) {
	switch {
	case c.Key != "":
		return l.keys.of(c.Key), nil
	case !c.Addr.IsValid():
		if errors.Is(c.Err, ErrNoClientAddress) {
			return l.keys.of(UnkeyedKey), nil
		}
		return l.keys.of(UnkeyedKey), ErrNoClientAddress
	}
	var buf [maxAddrKeyLen]byte
	return l.keys.ofBytes(appendAddrKey(buf[:0], c.Addr), str), nil
}

// keyOrUnkeyed is the bucket key s that a KeyFunc returned with err. An
// empty key never skips the limit: it is UnkeyedKey, with err or, if err is
// nil, ErrEmptyKey.
func keyOrUnkeyed(s string, err error) (string, error) {
	if s == "" {
		if err == nil {
			err = ErrEmptyKey
		}
		s = UnkeyedKey
	}
	return s, err
}

// charge is the one place where tokens are taken, in one call to the seam
// (which applies the failure policy when a remote Store fails). err is what
// went wrong before (key, policy); it is reported, never a bypass. It
// returns the policy that decided: ps, or the one that took over ps's
// buckets if SetPolicies changed it meanwhile. A request the rate limits
// let run then needs an in-flight slot of that policy, if it has an
// in-flight limit and s is not nil (hold).
func (l *Limiter) charge(ctx context.Context, ps *policyState, k bucketKey, n int, err error, d *Decision, s *slot) *policyState {
	if n < 1 {
		n, err = 1, errors.Join(err, ErrInvalidCost)
	}
	if n > ps.maxCost { // always, for a policy without rate limits (maxCost 0)
		if len(ps.Limits) == 0 {
			l.chargeSlot(ctx, ps, k, n, err, d, s)
			return ps
		}
		l.refuseCost(ps, n, err, d)
		return ps
	}
	if err != nil {
		l.keyErrors.Add(1)
	}
	var a answer
	if m, ok := l.store.(*memStore); ok {
		m.takeTo(ps.lane, k, n, &a) // the default store, without the seam's copies (takeTo)
	} else {
		a = l.store.take(ctx, ps.lane, k, n)
	}
	if a.lane != nil && a.lane != ps.lane {
		ps = ps.holding(a.lane)
	}
	d.record(ps, &a)
	d.Cost, d.Err = n, err
	if a.err != nil {
		l.storeErrors.Add(1)
		d.Degraded, d.Err = true, errors.Join(err, a.err)
	}
	d.DryRun = d.Outcome == Limited && l.dryRun
	if ps.slots != nil && s != nil && !d.denied() {
		l.hold(ctx, ps, k, s, d)
	}
	return ps
}

// chargeSlot is charge for a policy with an in-flight limit and no rate
// limit: no bucket and no Store call. The request is allowed if it gets a
// slot (hold) or needs none (s nil), with no quota (no Limit, no quota
// field; QuotaUnknown stays for a failed store). A cost means nothing to
// it: it is recorded, never refused.
func (l *Limiter) chargeSlot(ctx context.Context, ps *policyState, k bucketKey, n int, err error, d *Decision, s *slot) {
	if err != nil {
		l.keyErrors.Add(1)
	}
	ps.allowed.Add(1)
	d.record(ps, &answer{Result: store.Result{Allowed: true}})
	d.Cost, d.Err = n, err
	if s != nil {
		l.hold(ctx, ps, k, s, d)
	}
}

// refuseCost refuses a cost that some limit of ps can never pay, by the
// policy alone: no Store call, nothing charged, so a flood of such requests
// costs the store nothing. No bucket was asked, so the decision reports an
// unknown quota (Handler sends no quota fields, as when FailOpen or
// FailClosed decided) and a zero RetryAfter: no wait makes the request
// possible, so none is promised. The failure policy has nothing to decide,
// so it is never Degraded.
func (l *Limiter) refuseCost(ps *policyState, n int, err error, d *Decision) {
	l.keyErrors.Add(1)
	ps.limited.Add(1)
	d.record(ps, &answer{unknown: true})
	d.Cost, d.DryRun = n, l.dryRun
	d.Err = join(err, ErrCostOverBurst)
}

// refundCharge gives back the tokens of an allowed decision d to the bucket
// that paid them; a policy without rate limits has none (maxCost 0).
func (l *Limiter) refundCharge(ctx context.Context, ps *policyState, k bucketKey, d *Decision) {
	if ps.maxCost == 0 {
		return
	}
	_, ok, err := l.store.refund(ctx, ps.lane, k, d.Cost, d.Degraded)
	if err != nil {
		l.storeErrors.Add(1)
	}
	if ok {
		l.refunded.Add(1)
	}
}

// record records a seam's answer under policy ps in d. It is where every
// decision gets its quota, or is marked QuotaUnknown: the one place that
// fact is written (Respond marks a Decision it cannot trust through it
// too).
func (d *Decision) record(ps *policyState, a *answer) {
	d.Outcome, d.Policy, d.ps = Allowed, ps.Name, ps
	if !a.Allowed {
		d.Outcome = Limited
	}
	d.RetryAfter = a.RetryAfter
	if a.unknown {
		d.QuotaUnknown = true
		d.Remaining, d.ResetAfter, d.resets, d.tight = 0, 0, [maxLimits]time.Duration{}, 0
		return
	}
	d.Remaining, d.ResetAfter, d.resets, d.tight = a.Remaining, a.ResetAfter, a.Resets, uint8(a.tight)
}
