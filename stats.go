package addrlimit

// Stats is a snapshot of a Limiter's counters, all since New. The decision
// and error counters are exact: each counts every decision that had
// returned when Stats was called (and may count some still under way).
type Stats struct {
	// Decisions by outcome, all policies together. Limited includes dry-run
	// decisions.
	Allowed, Limited, Exempt uint64
	// Refunded counts allowed requests whose tokens WithRefund or
	// Limiter.Refund gave back.
	Refunded uint64
	// CredentialedLimited counts Limited requests that carried an
	// Authorization header. It is a hint, not proof: anyone can send
	// "Authorization: Bearer junk".
	CredentialedLimited uint64
	// RetiredTokenLimited counts Limited requests that carried a secret the
	// internal token has retired (InternalToken.WithRetired). Only your own
	// services know those secrets, so this is the signal to alert on: one of
	// them is being throttled because it still sends an old secret.
	RetiredTokenLimited uint64
	// KeyErrors counts requests whose key, policy or cost was not clean (see
	// ErrNoClientAddress and its siblings); each was still charged (to a
	// fallback key, policy or cost), or refused (ErrCostOverBurst).
	// StoreErrors counts failed Store calls: of decisions (then the failure
	// policy decided) and of refunds.
	KeyErrors, StoreErrors uint64
	// Keys is the number of exact buckets held in this process's memory,
	// all policies together: the buckets themselves, or, with a Store given
	// to WithStore, the local mirror and fallback kept under FailLocal (none
	// under FailOpen or FailClosed), never the store's own buckets.
	// Evictions counts buckets moved from the exact table into the
	// approximate memory to make room for new keys.
	Keys      int
	Evictions uint64
	// ApproxKeys estimates how many keys' state lives only in the
	// approximate memory, and ApproxFill is the fraction of its cells that
	// still hold a time in the future, in the fullest policy's table (0 until
	// a table first fills). A rising ApproxFill means an address flood; near
	// 1, newcomers start to share limits with the flood.
	ApproxKeys int
	ApproxFill float64
	// Policies breaks the decisions down by policy: the default one first.
	Policies []PolicyStats
	// Identities breaks Exempt and RetiredTokenLimited down by the
	// identities of the internal token (NewIdentities), in their order; the
	// anonymous secrets are counted only in the totals. Nil without
	// identities.
	Identities []IdentityStats
}

// PolicyStats are the counters of one policy.
type PolicyStats struct {
	Name             string
	Allowed, Limited uint64
	// Limits breaks Limited down by the limit that denied (Decision.Limit),
	// one entry per limit in the policy's order. The denials that no limit
	// made (FailClosed, a cost over the burst: Decision.QuotaUnknown) are
	// in Limited only.
	Limits []LimitStats
	Keys   int
	// InFlight is the number of in-flight slots held now under the policy
	// (Policy.InFlight) in this process's memory, and InFlightKeys the
	// keys holding them; InFlightLimited counts the requests the in-flight
	// limit refused (Decision.InFlightLimited; they count in Limited too).
	// InFlightWaiting is the number of requests waiting for a slot now
	// (WithInFlightWait); they hold none.
	InFlight, InFlightKeys, InFlightWaiting int
	InFlightLimited                         uint64
}

// LimitStats are the counters of one limit of a policy.
type LimitStats struct {
	Name    string
	Limited uint64
}

// Stats returns the counters. It is safe to call concurrently with requests
// and suits expvar.Func or a metrics collector that reads it at scrape time:
// it briefly locks each shard of each policy's table (256 at the default
// cap) and scans nothing, as the approximate memory counts its live cells
// as it is written (README, "Memory", gives its cost during a flood).
func (l *Limiter) Stats() Stats {
	l.mustBeBuilt()
	s := Stats{
		Exempt:              l.exempted.Load(),
		Refunded:            l.refunded.Load(),
		CredentialedLimited: l.credentialed.Load(),
		RetiredTokenLimited: l.retiredLimited.Load(),
		KeyErrors:           l.keyErrors.Load(),
		StoreErrors:         l.storeErrors.Load(),
	}
	var fill float64
	for _, ps := range l.policies {
		// Loaded before the table's: each of these was counted allowed
		// first, so Allowed never goes below zero.
		over, inFlightLimited := ps.inFlightOverAllowed.Load(), ps.inFlightLimited.Load()
		t := ps.table.Stats()
		p := PolicyStats{
			Name:            ps.Name,
			Allowed:         t.Allowed + ps.allowed.Load() - over,
			Limited:         t.Limited + ps.limited.Load() + over,
			InFlightLimited: inFlightLimited,
			Limits:          make([]LimitStats, len(ps.Limits)),
			Keys:            t.Keys,
		}
		if ps.slots != nil {
			p.InFlight, p.InFlightKeys = ps.slots.count()
			p.InFlightWaiting = int(ps.slots.waiters.Load())
		}
		for i, lim := range ps.Limits {
			p.Limits[i] = LimitStats{Name: lim.Name, Limited: t.LimitedBy[i] + ps.limitedBy[i].Load()}
		}
		s.Policies = append(s.Policies, p)
		s.Allowed += p.Allowed
		s.Limited += p.Limited
		s.Keys += p.Keys
		s.Evictions += t.Evictions
		s.ApproxKeys += t.ApproxKeys
		fill = max(fill, t.ApproxFill)
	}
	s.ApproxFill = fill
	s.Identities = l.identities.stats()
	return s
}
