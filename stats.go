package addrlimit

// Stats is a snapshot of a Limiter's counters since New.
type Stats struct {
	// Allowed, Limited (dry runs included) and Exempt decisions; Refunded
	// counts refunds.
	Allowed, Limited, Exempt, Refunded uint64
	// Limited calls with Authorization values (a hint: anyone can send
	// them), and with a retired secret (one of your services: alert).
	CredentialedLimited, RetiredTokenLimited uint64
	// KeyErrors: a key, policy or cost not clean; StoreErrors: failed Store
	// calls.
	KeyErrors, StoreErrors uint64
	// Keys: exact buckets in this process's memory (for a Store, its local
	// mirror); Evictions: moved to the approximate memory.
	Keys      int
	Evictions uint64
	// ApproxKeys estimates the keys only the approximate memory holds;
	// ApproxFill rises towards 1 in an address flood.
	ApproxKeys int
	ApproxFill float64
	Policies   []PolicyStats   // the default first
	Identities []IdentityStats // of NewIdentities
}

// PolicyStats are the counters of one policy.
type PolicyStats struct {
	Name             string
	Allowed, Limited uint64
	Limits           []LimitStats // Limited by the limit that denied
	Keys             int
}

// LimitStats are the counters of one limit of a policy.
type LimitStats struct {
	Name    string
	Limited uint64
}

// Stats returns the counters, for expvar.Func or a collector at scrape time: it
// briefly locks each table shard and scans nothing.
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
	for _, ps := range l.pols.Load().list {
		t := ps.table.Stats()
		p := PolicyStats{
			Name:    ps.Name,
			Allowed: t.Allowed + ps.allowed.Load(),
			Limited: t.Limited + ps.limited.Load(),
			Limits:  make([]LimitStats, len(ps.Limits)),
			Keys:    t.Keys,
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
	var cur *tokenSecrets
	if l.token != nil {
		cur = l.token.load()
	}
	ids, _ := l.identitiesOf(cur, 0)
	s.Identities = ids.stats()
	return s
}
