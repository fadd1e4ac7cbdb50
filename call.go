package addrlimit

import (
	"context"
	"net/netip"
)

// Call describes a call to Decide, whatever transport carries it (grpclimit
// builds one per gRPC call).
type Call struct {
	// Addr is the client's address; Key, if set, the bucket's key
	// instead. With neither: UnkeyedKey (ErrNoClientAddress).
	Addr netip.Addr
	Key  string
	// Authorization values as presented (never kept or observed): an
	// accepted "Bearer" secret exempts the call, as Exempt does.
	Authorization []string
	Exempt        bool
	Policy        string // "" for the default
	Cost          int    // 0 means 1
	Route         string // for observers
	NoSlot        bool   // pass the rate limits only: no in-flight slot (a stream's message)
	Err           error  // a warning met describing the call
}

// Decide decides c on Handler's path (but WithExempt, an HTTP rule) and tells
// the observers; ctx's cancellation never reaches the Store. It writes
// nothing: refuse a Denied decision, send QuotaFields where your protocol
// can, and defer Release of an in-flight slot (unless c.NoSlot).
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
	l.keep(&d, s)
	l.observe(ctx, &d)
	return d
}
