package addrlimit

import "github.com/addrlimit/addrlimit/internal/bucket"

// Stats is a snapshot of a Limiter's counters since New.
type Stats struct {
	Allowed, Limited, Exempt, Refunded uint64 // Limited: dry runs too
	// Limited with Authorization values (anyone can send them), and with a
	// retired secret (one of your services: alert).
	CredentialedLimited, RetiredTokenLimited uint64
	KeyErrors, StoreErrors                   uint64 // a key, policy or cost not clean; failed Store calls
	Keys                                     int    // exact buckets in memory (for a Store: its local mirror)
	Evictions                                uint64 // moved to the approximate memory
	ApproxKeys                               int    // held only by the approximate memory (estimate)
	ApproxFill                               float64
	Policies                                 []PolicyStats   // the default first
	Identities                               []IdentityStats // of NewIdentities
}

// PolicyStats are the counters of one policy; its in-flight slots (held now,
// by how many keys, requests waiting, refusals also in Limited) are this
// process's: in memory, and the leases it holds in a fleet store.
type PolicyStats struct {
	Name                                    string
	Allowed, Limited                        uint64
	Limits                                  []LimitStats // Limited by the limit that denied
	Keys                                    int
	InFlight, InFlightKeys, InFlightWaiting int
	InFlightLimited                         uint64
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
		// Loaded before the table's: each of these was counted allowed
		// first, so Allowed never goes below zero.
		over, inFlightLimited := ps.inFlightOverAllowed.Load(), ps.inFlightLimited.Load()
		var t bucket.TableStats // none without rate limits
		if ps.table != nil {
			t = ps.table.Stats()
		}
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
			if f, ok := l.store.(*failover); ok && f.leases != nil {
				// The fleet store's slots this process holds (a key that
				// holds FailLocal's slots too counts in both).
				held, keys := f.leases.count(ps.Name)
				p.InFlight, p.InFlightKeys = p.InFlight+held, p.InFlightKeys+keys
			}
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
	var cur *tokenSecrets
	if l.token != nil {
		cur = l.token.load()
	}
	ids, _ := l.identitiesOf(cur, 0)
	s.Identities = ids.stats()
	return s
}
