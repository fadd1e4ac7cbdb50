package addrlimit

import (
	"context"
	"net/netip"
)

// Call describes a call to Decide, whatever carries it. Handler and Allow
// describe an HTTP request by the Limiter's HTTP rules (PolicySelector,
// KeyFunc, WithCost); grpclimit describes a gRPC call by its own. Only an
// exemption skips the limit: what is missing or wrong is charged to a
// fallback and reported in Decision.Err.
type Call struct {
	// Addr is the client's address, keyed by AddrKey. With neither Addr nor
	// Key the call is charged to UnkeyedKey (ErrNoClientAddress).
	Addr netip.Addr
	// Key, if set, is the bucket's key instead, named as for AllowKey.
	Key string
	// Authorization holds the call's Authorization values as presented, in
	// order (never kept or observed): one "Bearer <secret>" of
	// WithInternalToken exempts the call, as Exempt does (the adapter's
	// WithExempt).
	Authorization []string
	Exempt        bool
	// Policy ("" for the default one) and Cost (0 means 1) fall back as
	// AllowKey's do.
	Policy string
	Cost   int
	// Route names what was called, for observers (Decision.Route).
	Route string
	// NoSlot makes the call pass the rate limits only, taking no in-flight
	// slot (Policy.InFlight): for a charge within work that already holds
	// one, such as a message of a stream.
	NoSlot bool
	// Err is a warning met while describing the call (such as
	// TrustedProxies.ClientAddrFrom's), reported in Decision.Err.
	Err error
}

// Decide decides c on the path of Handler (the internal token on
// c.Authorization, the policy, the key, the store and its failure policy,
// WithDryRun, the counters; not WithExempt, an HTTP rule) and tells the
// observers, with ctx, whose cancellation does not reach the Store. It
// writes nothing: refuse a Denied decision yourself, and send QuotaFields
// where your protocol carries them. A counted decision's Key is always set.
// Under a policy with an in-flight limit, an allowed decision holds a slot
// (unless c.NoSlot) until Release frees it: defer it for the call's life.
func (l *Limiter) Decide(ctx context.Context, c Call) Decision {
	l.mustBeBuilt()
	if c.Cost == 0 {
		c.Cost = 1
	}
	if c.Key != "" {
		if k := l.namedKey(c.Key); k != "" {
			c.Key = k
		}
	}
	var d Decision
	var s slot
	sp := &s
	if c.NoSlot {
		sp = nil
	}
	_, k := l.decide(ctx, &c, nil, true, &d, sp)
	d.Key = k.s
	d.keep(s)
	l.observe(ctx, d)
	return d
}
