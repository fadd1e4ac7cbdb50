package addrlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
)

// decide is the one path of a request: exemption, then policy and key, then
// cost, then the charge, into *d, a zero Decision of the caller's. The key's
// string is built only if str is set or the seam needs it. *d is an
// out-parameter because a Decision (some 130 bytes) returned by value from
// decide, charge and refuseCost measured slower: +16% on
// BenchmarkDeniedOptions/limit=300/minute/headers=none and +22% on
// BenchmarkAllowed10k/lib=addrlimit-noheaders of the benchmarks module
// (benchstat, n=8, 2-core machine under load).
func (l *Limiter) decide(r *http.Request, str bool, d *Decision) (*policyState, bucketKey) {
	class := l.exemption(r, d)
	if d.Outcome == Exempt {
		return nil, bucketKey{}
	}
	ps, k, err := l.policyAndKey(r, str || l.strKeys)
	n := 1
	if l.cost != nil {
		n = l.cost(r)
	}
	l.charge(r.Context(), ps, k, n, err, d)
	l.countCredentials(r, class, d)
	return ps, k
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
			return ps, l.key(key), nil
		}
		err = selErr
	}
	k, keyErr := l.requestKey(r, str)
	if err == nil {
		return ps, k, keyErr // errors.Join is not free
	}
	return ps, k, errors.Join(err, keyErr)
}

// requestKey is the key of r under the KeyFunc: the peer address by default,
// formatted on the stack and hashed, and copied to a string only if str is
// set. That saves the default path an allocation: see
// BenchmarkAllowed/lib=addrlimit of the benchmarks module (0 allocs/op)
// against BenchmarkAllowedOptions/keyfunc=RemoteAddrKey (the same key as a
// string: 1).
func (l *Limiter) requestKey(r *http.Request, str bool) (bucketKey, error) {
	if l.keyFunc == nil {
		a, err := peerAddr(r)
		if err != nil {
			return l.key(UnkeyedKey), err
		}
		var buf [maxAddrKeyLen]byte
		b := appendAddrKey(buf[:0], a)
		k := bucketKey{hash: maphash.Bytes(l.seed, b)}
		if str {
			k.s = string(b)
		}
		return k, nil
	}
	s, err := l.keyFunc(r)
	if s == "" {
		if err == nil {
			err = ErrEmptyKey
		}
		s = UnkeyedKey
	}
	return l.key(s), err
}

// key is the bucket key s (which hashes as its bytes would).
func (l *Limiter) key(s string) bucketKey { return bucketKey{hash: maphash.String(l.seed, s), s: s} }

// charge is the one place where tokens are taken, in one call to the seam
// (which applies the failure policy when a remote Store fails). err is what
// went wrong before (key, policy); it is reported, never a bypass.
func (l *Limiter) charge(ctx context.Context, ps *policyState, k bucketKey, n int, err error, d *Decision) {
	if n < 1 {
		n, err = 1, errors.Join(err, ErrInvalidCost)
	}
	if n > ps.Burst {
		l.refuseCost(ctx, ps, k, n, err, d)
		return
	}
	if err != nil {
		l.keyErrors.Add(1)
	}
	a := l.store.take(ctx, ps, k, n)
	d.set(ps, a.Result)
	if a.unknown {
		d.Limit = 0
	}
	d.Cost, d.Err = n, err
	if a.err != nil {
		l.storeErrors.Add(1)
		d.Degraded, d.Err = true, errors.Join(err, a.err)
	}
	d.DryRun = d.Outcome == Limited && l.dryRun
}

// refuseCost refuses a cost that no bucket of ps can ever pay, charging
// nothing. The decision reports the bucket's state (from the store, or the
// local bucket if the store fails), Cost > Limit, and a zero RetryAfter: no
// wait makes the request possible, so none is promised.
func (l *Limiter) refuseCost(ctx context.Context, ps *policyState, k bucketKey, n int, err error, d *Decision) {
	l.keyErrors.Add(1)
	ps.limited.Add(1)
	res, _ := l.store.peek(context.WithoutCancel(ctx), ps, k)
	d.set(ps, res)
	d.Outcome, d.Cost, d.DryRun = Limited, n, l.dryRun
	d.RetryAfter = 0
	d.Err = errors.Join(err, ErrCostOverBurst)
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

// set records a bucket's answer under policy ps in d.
func (d *Decision) set(ps *policyState, res Result) {
	d.Outcome, d.Policy, d.Limit = Allowed, ps.Name, ps.Burst
	d.Remaining, d.RetryAfter, d.ResetAfter = res.Remaining, res.RetryAfter, res.ResetAfter
	if !res.Allowed {
		d.Outcome = Limited
	}
}

// count counts a decision that the in-memory table did not take.
func (ps *policyState) count(allowed bool) {
	if allowed {
		ps.allowed.Add(1)
	} else {
		ps.limited.Add(1)
	}
}
