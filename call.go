package addrlimit

import (
	"context"
	"net/netip"
)

// Call describes one call to Decide, whatever carries it: who makes it,
// under which policy and key, at what cost, and what observers see. Handler
// and Allow describe an HTTP request by the Limiter's HTTP rules (the
// PolicySelector, the KeyFunc, WithCost); an adapter of another protocol,
// such as the grpclimit module, describes a call by its own. Nothing in a
// Call skips the limit: bad or missing parts are charged to a fallback and
// reported in Decision.Err.
type Call struct {
	// Addr is the client's address: the peer of the connection, or the
	// client that trusted proxies name (TrustedProxies.ClientAddrFrom).
	// The call is charged to AddrKey(Addr) unless Key is set; with neither,
	// to UnkeyedKey, reported as ErrNoClientAddress.
	Addr netip.Addr
	// Key, when not empty, is the bucket's key instead of Addr's, named as
	// for AllowKey (an address in any notation names its client's bucket).
	Key string
	// Authorization holds the call's Authorization values as presented
	// (every header line, or gRPC's "authorization" metadata), in order. A
	// call with exactly one value "Bearer <secret>" of the Limiter's
	// InternalToken is exempt, as on HTTP. The values are neither kept nor
	// logged nor shown to observers.
	Authorization []string
	// Policy names the policy ("" for the default one). An unknown name is
	// charged to the default policy and reported as ErrUnknownPolicy.
	Policy string
	// Cost is the tokens the call costs; 0 means 1. A negative cost is
	// charged as 1 (ErrInvalidCost); one above the burst is refused and
	// charges nothing (ErrCostOverBurst).
	Cost int
	// Route names what was called, for observers and logs (Decision.Route):
	// an HTTP route or path, a gRPC full method, a command.
	Route string
	// Err is a problem met while describing the call that does not stop it,
	// such as the warning of TrustedProxies.ClientAddrFrom about a malformed
	// proxy header: reported in Decision.Err.
	Err error
}

// Decide decides c, charges it and tells the observers, as Allow does for an
// HTTP request: the exemption of WithInternalToken (on c.Authorization; the
// HTTP rule WithExempt does not apply), the policy, the key, the store and
// its failure policy, WithDryRun, the counters. It writes nothing: a Denied
// decision is the caller's to refuse, with Decision.RetryAfter as the wait,
// and QuotaFields renders the quota fields Handler would send. ctx reaches
// the Store and the observers; its cancellation does not (the store's own
// timeout bounds the call). Decision.Key is always set.
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
	_, k := l.decide(ctx, &c, nil, true, &d)
	d.Key = k.s
	l.observe(ctx, d)
	return d
}
