package addrlimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/store"
)

// write writes what Handler writes for a counted decision d before it calls
// the next handler, and reports whether it refused the request: the
// refusal (refuse) for a denied one, else the quota fields.
func (l *Limiter) write(w http.ResponseWriter, r *http.Request, ps *policyState, d *Decision) (refused bool) {
	if d.denied() {
		l.refuse(w, r, ps, d)
		return true
	}
	if ps.headers.Lists() && !d.QuotaUnknown {
		ps.writeList(w.Header(), d)
		return false
	}
	// Header only when there is a field to set: once a handler has called
	// it, net/http copies the header map when the status is written.
	var st headers.State
	if ps.state(d, false, &st); ps.headers.Sets(&st) {
		ps.headers.Write(w.Header(), &st)
	}
	return false
}

// writeList is write's Write for a policy whose fields list several limits.
func (ps *policyState) writeList(h http.Header, d *Decision) {
	var each [maxLimits]headers.Member
	var st headers.State
	ps.state(d, false, &st)
	st.Each = ps.listed(d, &each)
	ps.headers.Write(h, &st)
}

// listed is State.Each for d: when the fields list several limits, each
// limit's state, which goes into each (the caller's, so that it stays on
// its stack); else nil. The caller sets it on its own State, which keeps
// each on its stack (stored through a pointer, it would escape).
func (ps *policyState) listed(d *Decision, each *[maxLimits]headers.Member) []headers.Member {
	if !ps.headers.Lists() {
		return nil
	}
	return ps.members(d, each)
}

// state sets s, a zero State, to what the header fields report about d:
// the quota fields describe the buckets (RateLimit's t is a wait for one
// token, whatever the request costs) unless the quota is unknown (the store
// failed under FailOpen or FailClosed, or the cost is over the burst);
// Retry-After describes the request (its wait for its cost, 1 s under
// FailClosed, and none when never is set: a cost over the burst). With
// several limits listed, the caller adds each limit's state (listed). It
// fills the caller's State in place (a State returned and then copied
// stalls the allowed path on store forwarding) and stays small enough to
// inline.
func (ps *policyState) state(d *Decision, never bool, s *headers.State) {
	s.Unknown = d.QuotaUnknown
	s.Remaining = d.Remaining
	s.NextToken = ps.lims[d.tight].NextToken(d.Remaining, d.ResetAfter)
	s.RetryAfter = d.RetryAfter
	s.ResetAfter = d.ResetAfter
	s.Denied = d.denied()
	s.Never = never
	s.Tight = int(d.tight)
}

// members fills each with the state of every limit of d, for the RateLimit
// field, and returns it as a slice.
func (ps *policyState) members(d *Decision, each *[maxLimits]headers.Member) []headers.Member {
	for i, lim := range ps.lims {
		remaining, _ := lim.Read(d.resets[i], 1)
		each[i] = headers.Member{Remaining: remaining, NextToken: lim.NextToken(remaining, d.resets[i])}
	}
	return each[:len(ps.lims)]
}

// overBurst reports whether d refused a cost above the burst, which no wait
// makes possible.
func (d *Decision) overBurst() bool {
	return d.Outcome == Limited && errors.Is(d.Err, ErrCostOverBurst)
}

// Respond writes what Handler would for d before next, for Allow's callers,
// and reports whether it refused. A decision this Limiter did not make (the
// zero one too) gets no quota field and, if denied, a 503.
func (l *Limiter) Respond(w http.ResponseWriter, r *http.Request, d Decision) (refused bool) {
	l.mustBeBuilt()
	if d.Outcome == Exempt {
		return false
	}
	set := l.pols.Load()
	ps := d.ps
	if !d.ps.leadsTo(set.byName[d.Policy]) || d.Outcome != Allowed && d.Outcome != Limited {
		// Not a decision of this policy (or of the one it replaced): quota
		// unknown, so no fields from another policy, and if denied (or not
		// a decision at all), FailClosed's refusal.
		policy, outcome := d.Policy, d.Outcome
		ps = set.list[0]
		d.record(ps, &answer{Result: store.Result{Allowed: outcome == Allowed, RetryAfter: time.Second}, unknown: true})
		d.Policy = policy
		if outcome != Allowed {
			d.DryRun = false
		}
	}
	return l.write(w, r, ps, &d)
}

// QuotaFields calls set with each quota field (lower-case name, value)
// Handler sends for d, for other transports (gRPC metadata); not Retry-After,
// and none for a decision Handler sends none for or this Limiter did not make.
func (l *Limiter) QuotaFields(d Decision, set func(name, value string)) {
	l.mustBeBuilt()
	ps := d.ps
	if !ps.leadsTo(l.pols.Load().byName[d.Policy]) || d.Outcome != Allowed && d.Outcome != Limited {
		return
	}
	var each [maxLimits]headers.Member
	var st headers.State
	ps.state(&d, false, &st)
	st.Each = ps.listed(&d, &each)
	st.Denied = false
	ps.headers.Fields(&st, set)
}

// refuse writes the response of a denied request: the WithDeniedHandler
// handler (after the header fields of state), or 429 Too Many Requests with a
// fixed body, or 413 Content Too Large without Retry-After for a cost above
// the burst (ErrCostOverBurst: it can never be paid), or 503 Service
// Unavailable when the quota is unknown because the store failed under
// FailClosed. The body never says anything about the key, the store or the
// error. The default response allocates nothing: its fields come from the
// policy's header arena, its body is shared.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, ps *policyState, d *Decision) {
	over := d.overBurst()
	var each [maxLimits]headers.Member
	var st headers.State
	if l.denied != nil {
		ps.state(d, over, &st)
		st.Each = ps.listed(d, &each)
		ps.headers.Write(w.Header(), &st)
		l.denied.ServeHTTP(w, r.WithContext(ContextWithDecision(r.Context(), *d)))
		return
	}
	status := http.StatusTooManyRequests
	switch {
	case over:
		// No wait makes this request possible: say so with a status that no
		// retry policy repeats and that tells the client to send less
		// (RFC 9110 §15.5.14), without Retry-After (state sets Never),
		// which would promise a success that never comes. The bucket was
		// not asked (refuseCost), so no quota fields either.
		status = http.StatusRequestEntityTooLarge
	case d.QuotaUnknown:
		status = http.StatusServiceUnavailable
	}
	ps.state(d, over, &st)
	st.Each = ps.listed(d, &each)
	body := ps.headers.WriteDenied(w.Header(), &st, status)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ContextWithDecision returns ctx carrying d for DecisionFromContext, to test a
// WithDeniedHandler handler on its own.
func ContextWithDecision(ctx context.Context, d Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}
