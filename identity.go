package addrlimit

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// MaxIdentities bounds NewIdentities, and so the metrics' identity label.
const MaxIdentities = 64

// Identity names the secrets one of your services holds, to report its calls
// under that name.
type Identity struct {
	Name    string   // by the rule of a policy name, unique
	Secrets []string // accepted: exempt
	Retired []string // as for InternalToken.WithRetired
}

// NewIdentities returns an InternalToken accepting every identity's secrets (at
// most MaxIdentities identities; each secret in one only), comparing them all
// without a branch on which matched.
func NewIdentities(ids ...Identity) (*InternalToken, error) {
	switch {
	case len(ids) == 0:
		return nil, errors.New("addrlimit: NewIdentities needs at least one identity")
	case len(ids) > MaxIdentities:
		return nil, fmt.Errorf("addrlimit: NewIdentities given %d identities, more than the maximum of %d", len(ids), MaxIdentities)
	}
	names := make([]string, len(ids))
	var accepted, retired []secretDigest
	seen := make(map[[32]byte]string) // digest -> "identity "x" secret N", for the duplicate error
	for i, id := range ids {
		if err := headers.CheckName(id.Name); err != nil {
			// CheckName speaks of a policy name
			return nil, fmt.Errorf("addrlimit: identity %d of %d: %s", i+1, len(ids), strings.Replace(err.Error(), "policy name", "name", 1))
		}
		for _, n := range names[:i] {
			if n == id.Name {
				return nil, fmt.Errorf("addrlimit: two identities are named %q", id.Name)
			}
		}
		names[i] = id.Name
		if len(id.Secrets)+len(id.Retired) == 0 {
			return nil, fmt.Errorf("addrlimit: identity %q has no secret", id.Name)
		}
		for _, part := range []struct {
			what    string
			secrets []string
			into    *[]secretDigest
		}{{"secret", id.Secrets, &accepted}, {"retired secret", id.Retired, &retired}} {
			ds, err := digestSecrets(fmt.Sprintf("identity %q %s", id.Name, part.what), part.secrets, i+1)
			if err != nil {
				return nil, err
			}
			for j, d := range ds {
				where := fmt.Sprintf("identity %q %s %d", id.Name, part.what, j+1)
				if prev, dup := seen[d.sum]; dup {
					return nil, fmt.Errorf("addrlimit: %s is the same secret as %s", where, prev)
				}
				seen[d.sum] = where
			}
			*part.into = append(*part.into, ds...)
		}
	}
	return newToken(newTokenSecrets(accepted, retired, names)), nil
}

// IdentityStats are the counters of one identity.
type IdentityStats struct {
	Name                string
	Exempt              uint64
	RetiredTokenLimited uint64
}

// identityCounters counts, per named identity of the Limiter's token (of
// its secrets src), the exempt and the retired-limited requests; counter i
// is identity i+1's (the anonymous secrets, identity 0, count only in the
// totals).
type identityCounters struct {
	src   *tokenSecrets
	names []string
	// The counters are shared with the counters of earlier and later
	// secrets for the identities of the same name, so that a count made on
	// either side of Replace is never lost.
	exempt, retired []*atomic.Uint64
}

// newIdentityCounters returns the counters of the identities of secrets ts
// (nil: none), starting from the counts of the identities of the same name
// in from (nil: zero).
func newIdentityCounters(ts *tokenSecrets, from *identityCounters) *identityCounters {
	var names []string
	if ts != nil {
		names = ts.names
	}
	c := &identityCounters{
		src:     ts,
		names:   names,
		exempt:  make([]*atomic.Uint64, len(names)),
		retired: make([]*atomic.Uint64, len(names)),
	}
	for i, n := range names {
		if j := from.index(n); j > 0 {
			c.exempt[i], c.retired[i] = from.exempt[j-1], from.retired[j-1]
		} else {
			c.exempt[i], c.retired[i] = new(atomic.Uint64), new(atomic.Uint64)
		}
	}
	return c
}

// index is the identity named name among c's (0: none, or c nil).
func (c *identityCounters) index(name string) int {
	if c == nil {
		return 0
	}
	for i, n := range c.names {
		if n == name {
			return i + 1
		}
	}
	return 0
}

// identitiesOf returns the counters of the identities of the token's
// current secrets, and the identity of them that is identity id of the
// secrets ts that a request was compared with (0: none). ts is the current
// secrets but right after InternalToken.Replace.
func (l *Limiter) identitiesOf(ts *tokenSecrets, id int) (*identityCounters, int) {
	c := l.identities.Load()
	if c.src == ts {
		return c, id
	}
	if cur := l.token.load(); c.src != cur {
		c = l.recount(cur)
	}
	if id == 0 || c.src == ts {
		return c, id
	}
	return c, c.index(ts.names[id-1])
}

// recount makes the counters follow the token's secrets cur: the
// identities that stay keep their counters.
func (l *Limiter) recount(cur *tokenSecrets) *identityCounters {
	l.identityMu.Lock()
	defer l.identityMu.Unlock()
	c := l.identities.Load()
	if c.src != cur {
		c = newIdentityCounters(cur, c)
		l.identities.Store(c)
	}
	return c
}

// count adds one to identity id's counter in counters, if it has one.
func (c *identityCounters) count(counters []*atomic.Uint64, id int) {
	if id > 0 {
		counters[id-1].Add(1)
	}
}

// name is identity id's name ("" for the anonymous secrets).
func (c *identityCounters) name(id int) string {
	if id == 0 {
		return ""
	}
	return c.names[id-1]
}

// stats returns the named identities' counters, in their order (nil when
// there are none).
func (c *identityCounters) stats() []IdentityStats {
	if len(c.names) == 0 {
		return nil
	}
	s := make([]IdentityStats, len(c.names))
	for i, n := range c.names {
		s[i] = IdentityStats{Name: n, Exempt: c.exempt[i].Load(), RetiredTokenLimited: c.retired[i].Load()}
	}
	return s
}
