package addrlimit

import (
	"context"
	"net/http"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// respond sets the header fields of a counted decision: the quota fields
// when the quota is known (Limit > 0), and for a denied request Retry-After
// and Cache-Control: no-store. A decision whose quota is unknown comes from
// FailOpen (allowed, no fields) or FailClosed (denied: Retry-After: 1).
func (ps *policyState) respond(h http.Header, d *Decision) {
	if d.Limit == 0 {
		if d.Denied() {
			ps.headers.WriteUnavailable(h)
		}
		return
	}
	ps.headers.Write(h, state(d))
}

// state is what the quota fields report about d.
func state(d *Decision) headers.State {
	return headers.State{
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Denied:     d.Denied(),
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
// d must be a decision of this Limiter (Allow or AllowKey). One of a policy
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
// fixed body, or 503 Service Unavailable when the quota is unknown because
// the store failed under FailClosed. The body never says anything about the
// key, the store or the error. The default response allocates nothing: its
// fields come from the policy's header arena, its body is shared.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, ps *policyState, d *Decision) {
	h := w.Header()
	if l.denied != nil {
		ps.respond(h, d)
		l.denied.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, *d)))
		return
	}
	var body []byte
	status := http.StatusTooManyRequests
	if d.Limit == 0 {
		status = http.StatusServiceUnavailable
		ps.headers.WriteUnavailable(h)
		body = ps.headers.WriteRefusal(h, status)
	} else {
		body = ps.headers.WriteDenied(h, state(d), status)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
