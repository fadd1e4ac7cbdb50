package addrlimit

import (
	"context"
	"fmt"
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
	// Limit is the bucket's capacity, its burst (the name follows the
	// RateLimit and X-RateLimit-Limit fields, which advertise it), or 0 when
	// the quota is unknown: the Store failed and FailOpen or FailClosed
	// decided, or the cost was over the burst (ErrCostOverBurst), which the
	// policy refuses without asking the Store. Remaining is the whole tokens
	// left after this request.
	Limit, Remaining int
	// RetryAfter is, for a Limited request, when to retry (zero for a cost
	// over the burst, ErrCostOverBurst, which no wait makes possible); for an
	// allowed one, the time until the bucket holds a whole token again, which
	// is zero while Remaining > 0.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
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
	// Err says why the key, the cost, the policy or the store was not what it
	// should be (see ErrNoClientAddress and its siblings), for observers and
	// logs; it is never sent to the client. A non-nil Err never means the
	// limit was skipped.
	Err error
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
