package addrlimit

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// Outcome says what a Limiter did with a request. The zero value is not an
// outcome.
type Outcome uint8

const (
	// Allowed: the request was charged and may proceed.
	Allowed Outcome = iota + 1
	// Limited: the bucket could not pay for the request, which is denied (or,
	// in dry-run mode, would have been). Nothing was charged.
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

// Decision describes what a Limiter decided for one request. For an Exempt
// decision every other field but Route and Identity is zero.
type Decision struct {
	Outcome Outcome
	// Route is Call.Route: an HTTP request's URL path, a gRPC call's full
	// method. Clients choose it: it is no bounded metric label.
	Route string
	// Policy names the policy that decided.
	Policy string
	// Key is the bucket the request was charged to (UnkeyedKey when it had
	// none). Treat it as personal data: it is usually a client address.
	// Handler fills it in only for an observer, a WithDeniedHandler
	// handler or WithDecisionInContext; the other methods always do.
	Key string
	// Cost is the number of tokens the request cost.
	Cost int
	// Remaining is the whole tokens left after this request in the tightest
	// limit of the policy, the one Limit returns: for a Limited decision,
	// the limit that denied it (of several, the one with the longest wait),
	// otherwise the one with the fewest tokens left. A policy of one limit
	// has only that one. Limits reports every limit.
	Remaining int
	// RetryAfter is, for a Limited request, when to retry: when every limit
	// holds the cost (zero for a cost over the burst, ErrCostOverBurst,
	// which no wait makes possible; one second when FailClosed decided).
	// For an allowed one, the time until every limit holds a whole token
	// again, which is zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the tightest limit's bucket is full
	// again.
	ResetAfter time.Duration
	// QuotaUnknown is set when no bucket answered, so Remaining, ResetAfter
	// and Limit say nothing: the Store failed and FailOpen or FailClosed
	// decided (Degraded is set too), or the cost was over the smallest burst
	// (ErrCostOverBurst), which the policy refuses without asking the
	// Store. Handler then sends no quota fields.
	QuotaUnknown bool
	// DryRun is set on a Limited decision that was let through by WithDryRun.
	DryRun bool
	// Degraded is set when the Store failed and the failure policy decided.
	Degraded bool
	// RetiredToken is set when the request carried a secret that the
	// internal token has retired (see InternalToken.WithRetired): one of your
	// own services still uses an old secret. Nobody else can produce it.
	RetiredToken bool
	// Identity names the identity (NewIdentities) whose secret the request
	// carried: on an Exempt decision, and with RetiredToken. It is empty for
	// the anonymous secrets of NewInternalToken and WithRetired, and for
	// every other request. Its values are the configured names only.
	Identity string
	// Credentialed: the request carried Authorization values but was not
	// exempt (anyone can send them).
	Credentialed bool
	// InFlight is, under a policy with an in-flight limit (Policy.InFlight),
	// how many of the key's requests hold a slot: counting this one when it
	// took a slot, or those that refused it; 0 when no slot was asked for
	// (no such limit, a request the rate limits denied, FailOpen).
	InFlight int
	// InFlightLimited is set on a Limited decision that the in-flight limit
	// refused: the rate limits allowed the request, and got its tokens back,
	// but Policy.InFlight of the key's requests were running. Limit and the
	// quota fields describe the rate limits; RetryAfter is one second.
	InFlightLimited bool
	// Err says why the key, the cost, the policy or the store was not what it
	// should be (see ErrNoClientAddress and its siblings), for observers and
	// logs; it is never sent to the client. A non-nil Err never means the
	// limit was skipped.
	Err error

	ps     *policyState             // the policy that decided; nil if none did
	resets [MaxLimits]time.Duration // each limit's time until full (Result.Resets)
	tight  uint8                    // the index of the tightest limit
	slot   *heldSlot                // the slot Allow, Decide or AllowKey took: see Release
}

// Limit returns the limit that Remaining and ResetAfter describe, with its
// name and burst (which the X-RateLimit-Limit field advertises): the
// tightest (see Remaining). It is the zero Limit when the quota is unknown
// (QuotaUnknown) or the Decision was not made by a Limiter.
func (d Decision) Limit() Limit {
	if d.ps == nil || d.QuotaUnknown {
		return Limit{}
	}
	return d.ps.Limits[d.tight]
}

// LimitState is one limit of a policy as a decision left it.
type LimitState struct {
	Limit
	// Remaining is the whole tokens the limit holds.
	Remaining int
	// RetryAfter is, for a Limited decision, the time until the limit holds
	// the decision's cost: above zero for the limits that denied it. For an
	// allowed one, the time until the limit holds a whole token.
	RetryAfter time.Duration
	// ResetAfter is the time until the limit's bucket is full.
	ResetAfter time.Duration
}

// Limits returns each limit of the decision's policy, in the policy's
// order, as the decision left it: nothing when the quota is unknown
// (QuotaUnknown) or the Decision was not made by a Limiter.
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
			remaining, wait := lim.read(d.resets[i], need)
			if !yield(LimitState{Limit: lim, Remaining: remaining, RetryAfter: wait, ResetAfter: max(d.resets[i], 0)}) {
				return
			}
		}
	}
}

// Denied reports whether the request must be refused: Limited and not a dry run.
func (d Decision) Denied() bool { return d.Outcome == Limited && !d.DryRun }

type decisionKey struct{}

// DecisionFromContext returns the Decision that a Limiter stored in the
// context of the request it passes to a WithDeniedHandler handler, and, with
// WithDecisionInContext, to the next handler of a counted request.
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// WithDecisionInContext makes Handler pass the Decision of each counted
// request (allowed, or limited in a dry run) to the next handler in the
// request's context, with Key filled in: for handlers that show it (a status
// endpoint, the quota in a JSON body) through DecisionFromContext. Exempt
// requests still reach the next handler untouched. It costs each counted
// request the context value, the request copy and the key string (README
// "Frameworks" gives the figures); without it the context is left alone.
func WithDecisionInContext() Option {
	return func(c *config) error {
		c.decisionInContext = true
		return nil
	}
}
