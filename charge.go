package addrlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
	"time"
)

// bucketKey is the key of one bucket: either bytes (a client address
// formatted into the caller's stack buffer, so the default path allocates
// nothing) or a string (from a KeyFunc, a PolicySelector or AllowKey). Both
// forms hash alike, so one key lands in one bucket however it was computed.
type bucketKey struct {
	b []byte
	s string
}

func (k bucketKey) hash(seed maphash.Seed) uint64 {
	if k.b != nil {
		return maphash.Bytes(seed, k.b)
	}
	return maphash.String(seed, k.s)
}

func (k bucketKey) String() string {
	if k.b != nil {
		return string(k.b)
	}
	return k.s
}

// decide is the one path of a request: exemption, then policy and key, then
// cost, then the charge. buf is the caller's stack buffer for the key bytes.
func (l *Limiter) decide(r *http.Request, buf []byte) (Decision, *policyState, bucketKey) {
	class := tokenNone
	if l.token != nil {
		class = l.token.classify(r)
	}
	if class == tokenAccepted || l.exempt != nil && l.exempt(r) {
		l.exempted.Inc()
		return Decision{Outcome: Exempt}, nil, bucketKey{}
	}
	ps, key, err := l.policyAndKey(r, buf)
	n := 1
	if l.cost != nil {
		n = l.cost(r)
	}
	d := l.charge(r.Context(), ps, key, n, err)
	d.RetiredToken = class == tokenRetired
	if d.Outcome == Limited {
		if len(r.Header["Authorization"]) > 0 {
			l.credentialed.Inc()
		}
		if d.RetiredToken {
			l.retiredLimited.Inc()
		}
	}
	return d, ps, key
}

// policyAndKey picks the policy (PolicySelector) and the key (the selector's,
// else the KeyFunc's, else the peer address). Errors never skip the limit:
// they fall back to the default policy, the KeyFunc's key or UnkeyedKey.
func (l *Limiter) policyAndKey(r *http.Request, buf []byte) (*policyState, bucketKey, error) {
	ps := l.policies[0]
	var err error
	if l.selector != nil {
		name, key, selErr := l.selector(r)
		switch {
		case selErr != nil:
			err = selErr
		case name != "":
			if named, lookupErr := l.lookupPolicy(name); lookupErr != nil {
				err = lookupErr
			} else if ps = named; key != "" {
				return ps, bucketKey{s: key}, nil
			}
		}
	}
	key, keyErr := l.requestKey(r, buf)
	return ps, key, errors.Join(err, keyErr)
}

// requestKey is the key of r under the KeyFunc: the peer address by default,
// formatted into buf.
func (l *Limiter) requestKey(r *http.Request, buf []byte) (bucketKey, error) {
	if l.keyFunc == nil {
		a, err := peerAddr(r)
		if err != nil {
			return bucketKey{s: UnkeyedKey}, err
		}
		return bucketKey{b: appendAddrKey(buf, a)}, nil
	}
	s, err := l.keyFunc(r)
	if s == "" {
		if err == nil {
			err = ErrEmptyKey
		}
		s = UnkeyedKey
	}
	return bucketKey{s: s}, err
}

// charge is the one place where tokens are taken: from the in-memory table,
// or from the Store with the failure policy applied when it fails. err is
// what went wrong before (key, policy); it is reported, never a bypass.
func (l *Limiter) charge(ctx context.Context, ps *policyState, key bucketKey, n int, err error) Decision {
	if n < 1 {
		n, err = 1, errors.Join(err, ErrInvalidCost)
	}
	if n > ps.Burst {
		// No bucket can ever pay this: refuse, charge nothing, and say when
		// the bucket would at least be full.
		l.keyErrors.Inc()
		ps.limited.Inc()
		return Decision{
			Outcome: Limited, Policy: ps.Name, Cost: n, Limit: ps.Burst,
			RetryAfter: time.Duration(ps.Burst) * ps.Interval, DryRun: l.dryRun,
			Err: errors.Join(err, ErrCostOverBurst),
		}
	}
	if err != nil {
		l.keyErrors.Inc()
	}
	h := key.hash(l.seed)
	if l.store == nil {
		d := fromResult(ps, Result(ps.table.Take(h, l.now(), int64(n))))
		d.Cost, d.Err, d.DryRun = n, err, d.Outcome == Limited && l.dryRun
		return d
	}
	res, storeErr := l.store.Take(ctx, key.String(), ps.Policy, n)
	if storeErr == nil {
		if l.failure == FailLocal {
			ps.table.Mirror(h, l.now(), res.ResetAfter)
		}
		d := fromResult(ps, res)
		d.Cost, d.Err, d.DryRun = n, err, d.Outcome == Limited && l.dryRun
		ps.count(d)
		return d
	}
	l.storeErrors.Inc()
	var d Decision
	switch l.failure {
	case FailOpen:
		d = Decision{Outcome: Allowed, Policy: ps.Name} // quota unknown: Limit 0
		ps.count(d)
	case FailClosed:
		d = Decision{Outcome: Limited, Policy: ps.Name, RetryAfter: time.Second}
		ps.count(d)
	default:
		d = fromResult(ps, Result(ps.table.Take(h, l.now(), int64(n)))) // counted by the table
	}
	d.Cost, d.Degraded, d.Err = n, true, errors.Join(err, storeErr)
	d.DryRun = d.Outcome == Limited && l.dryRun
	return d
}

// refundCharge gives back the tokens of an allowed decision d to the bucket
// that paid them: the store's, or the local one that decided under
// FailLocal. Nothing was charged under FailOpen, so nothing is refunded.
func (l *Limiter) refundCharge(ctx context.Context, ps *policyState, key bucketKey, d Decision) {
	h := key.hash(l.seed)
	switch {
	case l.store == nil || d.Degraded && l.failure == FailLocal:
		ps.table.Refund(h, l.now(), int64(d.Cost))
	case d.Degraded:
		return
	default:
		res, err := l.store.Refund(ctx, key.String(), ps.Policy, d.Cost)
		if err != nil {
			l.storeErrors.Inc()
			return
		}
		if l.failure == FailLocal {
			ps.table.Mirror(h, l.now(), res.ResetAfter)
		}
	}
	l.refunded.Inc()
}

// fromResult turns a bucket's answer into a Decision of policy ps.
func fromResult(ps *policyState, res Result) Decision {
	d := Decision{
		Outcome:    Allowed,
		Policy:     ps.Name,
		Limit:      ps.Burst,
		Remaining:  res.Remaining,
		RetryAfter: res.RetryAfter,
		ResetAfter: res.ResetAfter,
	}
	if !res.Allowed {
		d.Outcome = Limited
	}
	return d
}

// count counts a decision that the in-memory table did not take.
func (ps *policyState) count(d Decision) {
	if d.Outcome == Allowed {
		ps.allowed.Inc()
	} else {
		ps.limited.Inc()
	}
}
