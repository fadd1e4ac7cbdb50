package addrlimit

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// Outcome says what a Limiter did with a call. The zero value is none.
type Outcome uint8

const (
	// Allowed: the request was charged and may proceed.
	Allowed Outcome = iota + 1
	// Limited: denied (or, in a dry run, would have been); nothing charged.
	Limited
	// Exempt: the exemption matched; nothing was counted or charged.
	Exempt
)

// String returns "allowed", "limited" or "exempt".
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Limited:
		return "limited"
	case Exempt:
		return "exempt"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Decision describes what a Limiter decided for one call. An Exempt one has
// only Route and Identity set.
type Decision struct {
	Outcome Outcome
	Route   string // Call.Route: client-chosen, no bounded metric label
	Policy  string
	Key     string // the bucket charged, personal data; set by Handler only for observers, WithDeniedHandler, WithDecisionInContext
	Cost    int
	// Remaining and ResetAfter: of the tightest limit (Limit). RetryAfter:
	// until every limit holds the cost (0 for ErrCostOverBurst, 1s under
	// FailClosed or an in-flight refusal) or a token.
	Remaining, InFlight    int // InFlight: the key's slots held (Policy.InFlight), this one's included
	RetryAfter, ResetAfter time.Duration
	QuotaUnknown           bool // no bucket answered (FailOpen, FailClosed, ErrCostOverBurst): no quota field
	DryRun, Degraded       bool // Limited but served (WithDryRun); the Store failed, the failure policy decided
	RetiredToken           bool // a retired secret (WithRetired) of Identity, if named
	Identity               string
	Credentialed           bool  // Authorization values, not exempt: anyone can send them
	InFlightLimited        bool  // the in-flight limit refused what the rate limits allowed (tokens given back)
	Err                    error // why the key, cost, policy or store was not clean: for observers, never a skipped limit

	ps     *policyState             // the policy that decided; nil if none did
	resets [maxLimits]time.Duration // each limit's time until full (Result.Resets)
	tight  uint8                    // the index of the tightest limit
	slot   *heldSlot                // the slot Allow, Decide or AllowKey took: see Release
}

// Limit returns the tightest limit: the one that denied (of several, the
// longest wait), else the one with the fewest tokens; zero when the quota is
// unknown, the policy has no rate limit, or a Limiter did not make d.
func (d Decision) Limit() Limit {
	if d.ps == nil || d.QuotaUnknown || len(d.ps.Limits) == 0 {
		return Limit{}
	}
	return d.ps.Limits[d.tight]
}

// LimitState is one limit as a decision left it.
type LimitState struct {
	Limit
	Remaining  int           // whole tokens held
	RetryAfter time.Duration // above zero if it denied
	ResetAfter time.Duration // until its bucket is full
}

// Limits returns each limit of d's policy, in order, as d left it; nothing when
// Limit is zero.
func (d Decision) Limits() iter.Seq[LimitState] {
	return func(yield func(LimitState) bool) {
		if d.ps == nil || d.QuotaUnknown {
			return
		}
		need := 1
		if d.Outcome == Limited {
			need = d.Cost
		}
		for i, lim := range d.ps.Limits {
			remaining, wait := d.ps.lims[i].Read(d.resets[i], need)
			if !yield(LimitState{Limit: lim, Remaining: remaining, RetryAfter: wait, ResetAfter: max(d.resets[i], 0)}) {
				return
			}
		}
	}
}

// Denied reports whether the call must be refused: Limited, not a dry run.
func (d Decision) Denied() bool { return d.denied() }

// denied is Denied for the Limiter's own use: a method of a Decision
// value copies the whole Decision even when inlined, a cost on every
// request.
func (d *Decision) denied() bool { return d.Outcome == Limited && !d.DryRun }

type decisionKey struct{}

// DecisionFromContext returns the Decision a Limiter put in a request's context
// (WithDeniedHandler, WithDecisionInContext).
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// WithDecisionInContext makes Handler pass each counted request's Decision, Key
// set, to the next handler in its context (DecisionFromContext), for a status
// endpoint or a quota in a JSON body. It costs a context value, a request copy
// and the key string per request (docs/frameworks.md).
func WithDecisionInContext() Option {
	return func(c *config) error {
		c.decisionInContext = true
		return nil
	}
}
