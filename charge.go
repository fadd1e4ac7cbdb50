package addrlimit

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// decide is the one path of a request (Handler, Allow, AllowAs): exemption,
// then policy, key and cost (by the Limiter's rules, or as AllowAs says),
// then the charge, into *d, a zero Decision of the caller's. The key's
// string is built only if str is set or the seam needs it. *d is an
// out-parameter because a Decision returned by value from decide, charge
// and refuseCost measured slower on BenchmarkDeniedOptions and
// BenchmarkAllowed10k (see internal/DESIGN.md).
func (l *Limiter) decide(r *http.Request, as *chargeAs, str bool, d *Decision) (*policyState, bucketKey) {
	class := l.exemption(r, d)
	if d.Outcome == Exempt {
		return nil, bucketKey{}
	}
	var (
		ps  *policyState
		k   bucketKey
		err error
		n   = 1
	)
	if as == nil {
		ps, k, err = l.policyAndKey(r, str)
		if l.cost != nil {
			n = l.cost(r)
		}
	} else {
		var keyErr error
		ps, err = l.lookupPolicy(as.policy)
		k, keyErr = l.requestKey(r, as.key, str)
		err, n = join(err, keyErr), as.n
	}
	l.charge(r.Context(), ps, k, n, err, d)
	l.countCredentials(r, class, d)
	return ps, k
}

// chargeAs is how AllowAs charges a request: n tokens under the named
// policy, to the key that key returns (nil: the peer address).
type chargeAs struct {
	policy string
	key    KeyFunc
	n      int
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

// exemption classifies r's bearer token and, if r is exempt (an accepted
// secret, or WithExempt), counts it and sets d.Outcome to Exempt.
func (l *Limiter) exemption(r *http.Request, d *Decision) tokenClass {
	class := tokenNone
	if l.token != nil {
		class = l.token.classify(r.Header["Authorization"])
	}
	if class == tokenAccepted || l.exempt != nil && l.exempt(r) {
		l.exempted.Add(1)
		d.Outcome = Exempt
	}
	return class
}

// countCredentials flags a retired secret in the charged decision d and
// counts a limited request that carried credentials.
func (l *Limiter) countCredentials(r *http.Request, class tokenClass, d *Decision) {
	d.RetiredToken = class == tokenRetired
	if d.Outcome == Limited {
		if len(r.Header["Authorization"]) > 0 {
			l.credentialed.Add(1)
		}
		if d.RetiredToken {
			l.retiredLimited.Add(1)
		}
	}
}

// policyAndKey picks the policy (PolicySelector) and the key (the selector's,
// else the KeyFunc's, else the peer address). Errors never skip the limit:
// they fall back to the default policy, the KeyFunc's key or UnkeyedKey.
func (l *Limiter) policyAndKey(r *http.Request, str bool) (ps *policyState, k bucketKey, err error) {
	ps = l.policies[0]
	if l.selector != nil {
		name, key, selErr := l.selector(r)
		if selErr == nil {
			ps, selErr = l.lookupPolicy(name) // "" is the default policy
		}
		if selErr == nil && key != "" {
			return ps, l.keys.of(key), nil
		}
		err = selErr
	}
	k, keyErr := l.requestKey(r, l.keyFunc, str)
	return ps, k, join(err, keyErr)
}

// requestKey is the key that f (nil: the peer address) gives r. The peer
// address is formatted on the stack and hashed, and copied to a string only
// if str is set or the seam needs it: that saves the default path an
// allocation (BenchmarkAllowed/lib=addrlimit of the benchmarks module, 0
// allocs/op, against BenchmarkAllowedOptions/keyfunc=RemoteAddrKey, the
// same key as a string: 1).
func (l *Limiter) requestKey(r *http.Request, f KeyFunc, str bool) (bucketKey, error) {
	if f == nil {
		a, err := peerAddr(r)
		if err != nil {
			return l.keys.of(UnkeyedKey), err
		}
		var buf [maxAddrKeyLen]byte
		return l.keys.ofBytes(appendAddrKey(buf[:0], a), str), nil
	}
	s, err := f(r)
	return l.stringKey(s, err)
}

// stringKey is the bucket key s that a KeyFunc returned with err. An empty
// key never skips the limit: it is UnkeyedKey, with err or, if err is nil,
// ErrEmptyKey.
func (l *Limiter) stringKey(s string, err error) (bucketKey, error) {
	if s == "" {
		if err == nil {
			err = ErrEmptyKey
		}
		s = UnkeyedKey
	}
	return l.keys.of(s), err
}

// charge is the one place where tokens are taken, in one call to the seam
// (which applies the failure policy when a remote Store fails). err is what
// went wrong before (key, policy); it is reported, never a bypass.
func (l *Limiter) charge(ctx context.Context, ps *policyState, k bucketKey, n int, err error, d *Decision) {
	if n < 1 {
		n, err = 1, errors.Join(err, ErrInvalidCost)
	}
	if n > ps.maxCost {
		l.refuseCost(ps, n, err, d)
		return
	}
	if err != nil {
		l.keyErrors.Add(1)
	}
	a := l.store.take(ctx, ps, k, n)
	d.record(ps, a)
	d.Cost, d.Err = n, err
	if a.err != nil {
		l.storeErrors.Add(1)
		d.Degraded, d.Err = true, errors.Join(err, a.err)
	}
	d.DryRun = d.Outcome == Limited && l.dryRun
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
	d.record(ps, answer{unknown: true})
	d.Cost, d.DryRun = n, l.dryRun
	d.Err = join(err, ErrCostOverBurst)
}

// refundCharge gives back the tokens of an allowed decision d to the bucket
// that paid them.
func (l *Limiter) refundCharge(ctx context.Context, ps *policyState, k bucketKey, d *Decision) {
	_, ok, err := l.store.refund(ctx, ps, k, d.Cost, d.Degraded)
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
func (d *Decision) record(ps *policyState, a answer) {
	d.Outcome, d.Policy, d.ps = Allowed, ps.Name, ps
	if !a.Allowed {
		d.Outcome = Limited
	}
	d.RetryAfter = a.RetryAfter
	if a.unknown {
		d.QuotaUnknown = true
		d.Remaining, d.ResetAfter, d.resets, d.tight = 0, 0, [MaxLimits]time.Duration{}, 0
		return
	}
	d.Remaining, d.ResetAfter, d.resets, d.tight = a.Remaining, a.ResetAfter, a.Resets, uint8(a.tight)
}
