package addrlimit

import (
	"context"
	"net/http"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// respond sets the header fields of a counted decision: the quota fields
// when the quota is known (Limit > 0), and for a denied request Retry-After
// (unless no wait can help: a cost over the burst) and Cache-Control:
// no-store. A decision whose quota is unknown comes from FailOpen (allowed,
// no fields) or FailClosed (denied: Retry-After: 1).
func (ps *policyState) respond(h http.Header, d *Decision) {
	if d.Limit == 0 {
		if d.Denied() {
			ps.headers.WriteUnavailable(h)
		}
		return
	}
	ps.headers.Write(h, ps.state(d))
}

// state is what the header fields report about d: the quota fields describe
// the bucket (RateLimit's t is its wait for one token, whatever the request
// costs), Retry-After the request (its wait for its cost).
func (ps *policyState) state(d *Decision) headers.State {
	var next time.Duration
	if d.Remaining <= 0 {
		// GCRA: the bucket holds a whole token once it is burst-1 tokens
		// from full.
		next = max(d.ResetAfter-time.Duration(d.Limit-1)*ps.Interval, 0)
	}
	return headers.State{
		Remaining:  d.Remaining,
		NextToken:  next,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Denied:     d.Denied(),
		Never:      d.Cost > d.Limit,
	}
}

// Respond writes what Handler writes for d before it would call the next
// handler, for callers of Allow whose framework has no slot for net/http
// middleware (gin) or who decide elsewhere: nothing for an Exempt decision,
// the quota fields for a counted one, and for a denied one the whole refusal
// Handler sends (the fields, Retry-After, Cache-Control: no-store and 429
// Too Many Requests with the fixed body, 503 when the store failed under
// FailClosed, or the WithDeniedHandler response). It reports whether it
// refused the request: then do not serve it (in gin, c.Abort()). r is the
// request being answered (a WithDeniedHandler handler gets it).
//
// d must be a decision of this Limiter (Allow, AllowAs or AllowKey). One of a policy
// the Limiter does not have gets no quota fields, and if denied, the 503
// refusal of an unknown quota: it is still refused.
func (l *Limiter) Respond(w http.ResponseWriter, r *http.Request, d Decision) (refused bool) {
	if d.Outcome != Allowed && d.Outcome != Limited {
		return false
	}
	ps := l.byName[d.Policy]
	if ps == nil {
		ps, d.Limit = l.policies[0], 0 // quota unknown: no fields from another policy
	}
	if d.Denied() {
		l.refuse(w, r, ps, &d)
		return true
	}
	ps.respond(w.Header(), &d)
	return false
}

// refuse writes the response of a denied request: the WithDeniedHandler
// handler (after the fields of respond), or 429 Too Many Requests with a
// fixed body, or 413 Content Too Large without Retry-After for a cost above
// the burst (ErrCostOverBurst: it can never be paid), or 503 Service
// Unavailable when the quota is unknown because the store failed under
// FailClosed. The body never says anything about the key, the store or the
// error. The default response allocates nothing: its fields come from the
// policy's header arena, its body is shared.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, ps *policyState, d *Decision) {
	h := w.Header()
	if l.denied != nil {
		ps.respond(h, d)
		l.denied.ServeHTTP(w, r.WithContext(ContextWithDecision(r.Context(), *d)))
		return
	}
	var body []byte
	status := http.StatusTooManyRequests
	switch {
	case d.Limit == 0:
		status = http.StatusServiceUnavailable
		ps.headers.WriteUnavailable(h)
		body = ps.headers.WriteRefusal(h, status)
	case d.Cost > d.Limit:
		// No wait makes this request possible: say so with a status that no
		// retry policy repeats and that tells the client to send less
		// (RFC 9110 §15.5.14), without Retry-After, which would promise a
		// success that never comes. The quota fields still describe the
		// bucket.
		status = http.StatusRequestEntityTooLarge
		body = ps.headers.WriteDenied(h, ps.state(d), status)
	default:
		body = ps.headers.WriteDenied(h, ps.state(d), status)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ContextWithDecision returns a copy of ctx that carries d, as the Limiter
// passes it to a WithDeniedHandler handler: DecisionFromContext returns d.
// Use it to test such a handler on its own.
func ContextWithDecision(ctx context.Context, d Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}
