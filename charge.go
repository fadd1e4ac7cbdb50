package addrlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
)

// A bucket key travels as two values, exactly one of them set: kb, bytes
// (a client address formatted into the caller's stack buffer, so that the
// default path allocates nothing), or ks, a string (from a KeyFunc, a
// PolicySelector or AllowKey). Both forms hash alike, so one key lands in
// one bucket however it was computed. They are not a struct because escape
// analysis would then let the string's escape drag the stack buffer to the
// heap.

// hashKey hashes the key given as kb or ks.
func hashKey(seed maphash.Seed, kb []byte, ks string) uint64 {
	if kb != nil {
		return maphash.Bytes(seed, kb)
	}
	return maphash.String(seed, ks)
}

// keyString returns the key given as kb or ks as a string (copying kb).
func keyString(kb []byte, ks string) string {
	if kb != nil {
		return string(kb)
	}
	return ks
}

// decide is the one path of a request: exemption, then policy and key, then
// cost, then the charge, into *d, a zero Decision of the caller's (at some
// 130 bytes, a Decision copied at every return costs the allowed path a
// quarter of its time). buf is the caller's stack buffer for the key bytes.
func (l *Limiter) decide(r *http.Request, buf []byte, d *Decision) (ps *policyState, kb []byte, ks string) {
	class := l.exemption(r, d)
	if d.Outcome == Exempt {
		return nil, nil, ""
	}
	ps, kb, ks, err := l.policyAndKey(r, buf)
	n := 1
	if l.cost != nil {
		n = l.cost(r)
	}
	l.charge(r.Context(), ps, kb, ks, n, err, d)
	l.countCredentials(r, class, d)
	return ps, kb, ks
}

// exemption classifies r's bearer token and, if r is exempt (an accepted
// secret, or WithExempt), counts it and sets d.Outcome to Exempt.
func (l *Limiter) exemption(r *http.Request, d *Decision) tokenClass {
	class := tokenNone
	if l.token != nil {
		class = l.token.classify(r.Header["Authorization"])
	}
	if class == tokenAccepted || l.exempt != nil && l.exempt(r) {
		l.exempted.Inc()
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
			l.credentialed.Inc()
		}
		if d.RetiredToken {
			l.retiredLimited.Inc()
		}
	}
}

// policyAndKey picks the policy (PolicySelector) and the key (the selector's,
// else the KeyFunc's, else the peer address). Errors never skip the limit:
// they fall back to the default policy, the KeyFunc's key or UnkeyedKey.
func (l *Limiter) policyAndKey(r *http.Request, buf []byte) (ps *policyState, kb []byte, ks string, err error) {
	ps = l.policies[0]
	if l.selector != nil {
		name, key, selErr := l.selector(r)
		if selErr == nil {
			ps, selErr = l.lookupPolicy(name) // "" is the default policy
		}
		if selErr == nil && key != "" {
			return ps, nil, key, nil
		}
		err = selErr
	}
	kb, ks, keyErr := l.requestKey(r, buf)
	if err == nil {
		return ps, kb, ks, keyErr // errors.Join is not free
	}
	return ps, kb, ks, errors.Join(err, keyErr)
}

// requestKey is the key of r under the KeyFunc: the peer address by default,
// formatted into buf.
func (l *Limiter) requestKey(r *http.Request, buf []byte) (kb []byte, ks string, err error) {
	if l.keyFunc == nil {
		a, err := peerAddr(r)
		if err != nil {
			return nil, UnkeyedKey, err
		}
		return appendAddrKey(buf, a), "", nil
	}
	s, err := l.keyFunc(r)
	if s == "" {
		if err == nil {
			err = ErrEmptyKey
		}
		s = UnkeyedKey
	}
	return nil, s, err
}

// key returns the key given as kb or ks as the seam wants it: hashed, and
// as a string only if the seam asked for strings in New.
func (l *Limiter) key(kb []byte, ks string) bucketKey {
	k := bucketKey{hash: hashKey(l.seed, kb, ks), s: ks}
	if kb != nil && l.strKeys {
		k.s = string(kb)
	}
	return k
}

// charge is the one place where tokens are taken, in one call to the seam
// (which applies the failure policy when a remote Store fails). err is what
// went wrong before (key, policy); it is reported, never a bypass.
func (l *Limiter) charge(ctx context.Context, ps *policyState, kb []byte, ks string, n int, err error, d *Decision) {
	if n < 1 {
		n, err = 1, errors.Join(err, ErrInvalidCost)
	}
	if n > ps.Burst {
		l.refuseCost(ctx, ps, kb, ks, n, err, d)
		return
	}
	if err != nil {
		l.keyErrors.Inc()
	}
	a := l.store.take(ctx, ps, l.key(kb, ks), n)
	d.set(ps, a.Result)
	if a.unknown {
		d.Limit = 0
	}
	d.Cost, d.Err = n, err
	if a.err != nil {
		l.storeErrors.Inc()
		d.Degraded, d.Err = true, errors.Join(err, a.err)
	}
	d.DryRun = d.Outcome == Limited && l.dryRun
}

// refuseCost refuses a cost that no bucket of ps can ever pay, charging
// nothing. The decision reports the bucket's state (from the store, or the
// local bucket if the store fails), Cost > Limit, and a zero RetryAfter: no
// wait makes the request possible, so none is promised.
func (l *Limiter) refuseCost(ctx context.Context, ps *policyState, kb []byte, ks string, n int, err error, d *Decision) {
	l.keyErrors.Inc()
	ps.limited.Inc()
	res, _ := l.store.peek(context.WithoutCancel(ctx), ps, l.key(kb, ks))
	d.set(ps, res)
	d.Outcome, d.Cost, d.DryRun = Limited, n, l.dryRun
	d.RetryAfter = 0
	d.Err = errors.Join(err, ErrCostOverBurst)
}

// refundCharge gives back the tokens of an allowed decision d to the bucket
// that paid them.
func (l *Limiter) refundCharge(ctx context.Context, ps *policyState, kb []byte, ks string, d *Decision) {
	_, ok, err := l.store.refund(ctx, ps, l.key(kb, ks), d.Cost, d.Degraded)
	if err != nil {
		l.storeErrors.Inc()
	}
	if ok {
		l.refunded.Inc()
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
		ps.allowed.Inc()
	} else {
		ps.limited.Inc()
	}
}
