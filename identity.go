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
	return &InternalToken{newTokenSecrets(accepted, retired, names)}, nil
}

// IdentityStats are the counters of one identity.
type IdentityStats struct {
	Name                string
	Exempt              uint64
	RetiredTokenLimited uint64
}

// identityCounters counts, per named identity of the Limiter's token, the
// exempt and the retired-limited requests; counter i is identity i+1's (the
// anonymous secrets, identity 0, count only in the totals).
type identityCounters struct {
	names           []string
	exempt, retired []atomic.Uint64
}

// newIdentityCounters returns the counters of t's identities (t may be nil).
func newIdentityCounters(t *InternalToken) *identityCounters {
	var names []string
	if t != nil {
		_, _, names = t.secrets()
	}
	return &identityCounters{
		names:   names,
		exempt:  make([]atomic.Uint64, len(names)),
		retired: make([]atomic.Uint64, len(names)),
	}
}

// count adds one to identity id's counter in counters, if it has one.
func (c *identityCounters) count(counters []atomic.Uint64, id int) {
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
