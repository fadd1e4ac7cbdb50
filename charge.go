package addrlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
	"time"
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

// charge is the one place where tokens are taken: from the in-memory table,
// or from the Store with the failure policy applied when it fails. err is
// what went wrong before (key, policy); it is reported, never a bypass.
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
	h := hashKey(l.seed, kb, ks)
	if l.store == nil {
		d.set(ps, Result(ps.table.Take(h, l.now(), int64(n))))
		d.Cost, d.Err, d.DryRun = n, err, d.Outcome == Limited && l.dryRun
		return
	}
	// Decided whatever the caller does: a client that hangs up cancels
	// r.Context(), and must not get the failure policy for it. The store's
	// own timeout bounds the call.
	key := keyString(kb, ks)
	res, storeErr := l.storeTake(context.WithoutCancel(ctx), ps, key, n)
	if storeErr == nil {
		if l.failure == FailLocal {
			ps.table.Mirror(h, l.now(), res.ResetAfter)
		}
		d.set(ps, res)
		d.Cost, d.Err, d.DryRun = n, err, d.Outcome == Limited && l.dryRun
		ps.count(d)
		return
	}
	l.storeErrors.Inc()
	switch l.failure {
	case FailOpen:
		*d = Decision{Outcome: Allowed, Policy: ps.Name} // quota unknown: Limit 0
		ps.count(d)
	case FailClosed:
		*d = Decision{Outcome: Limited, Policy: ps.Name, RetryAfter: time.Second}
		ps.count(d)
	default:
		d.set(ps, Result(ps.table.Take(h, l.now(), int64(n)))) // counted by the table
		if d.Outcome == Allowed {
			l.owe(ps, key, n)
		}
	}
	d.Cost, d.Degraded, d.Err = n, true, errors.Join(err, storeErr)
	d.DryRun = d.Outcome == Limited && l.dryRun
}

// refuseCost refuses a cost that no bucket of ps can ever pay, charging
// nothing. The decision reports the bucket's state (from the store, or the
// local bucket if the store fails), Cost > Limit, and a zero RetryAfter: no
// wait makes the request possible, so none is promised.
func (l *Limiter) refuseCost(ctx context.Context, ps *policyState, kb []byte, ks string, n int, err error, d *Decision) {
	l.keyErrors.Inc()
	ps.limited.Inc()
	res := Result(ps.table.Peek(hashKey(l.seed, kb, ks), l.now()))
	if l.store != nil {
		if remote, storeErr := l.store.Peek(context.WithoutCancel(ctx), keyString(kb, ks), ps.Policy); storeErr == nil {
			res = remote
		}
	}
	d.set(ps, res)
	d.Outcome, d.Cost, d.DryRun = Limited, n, l.dryRun
	d.RetryAfter = 0
	d.Err = errors.Join(err, ErrCostOverBurst)
}

// refundCharge gives back the tokens of an allowed decision d to the bucket
// that paid them: the store's, or the local one that decided under
// FailLocal. Nothing was charged under FailOpen, so nothing is refunded.
func (l *Limiter) refundCharge(ctx context.Context, ps *policyState, kb []byte, ks string, d *Decision) {
	h := hashKey(l.seed, kb, ks)
	switch {
	case l.store == nil || d.Degraded && l.failure == FailLocal:
		ps.table.Refund(h, l.now(), int64(d.Cost))
		if d.Degraded {
			ps.debts.cancel(keyString(kb, ks), d.Cost)
		}
	case d.Degraded:
		return
	default:
		res, err := l.store.Refund(ctx, keyString(kb, ks), ps.Policy, d.Cost)
		if err != nil {
			l.storeErrors.Inc()
			return
		}
		if l.failure == FailLocal {
			// The local copy keeps the later of its state and an answer
			// (answers may arrive out of order), so give it the refund
			// first, as the store did.
			now := l.now()
			ps.table.Refund(h, now, int64(d.Cost))
			ps.table.Mirror(h, now, res.ResetAfter)
		}
	}
	l.refunded.Inc()
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
func (ps *policyState) count(d *Decision) {
	if d.Outcome == Allowed {
		ps.allowed.Inc()
	} else {
		ps.limited.Inc()
	}
}
