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
func (ps *policyState) respond(h http.Header, d Decision) {
	if d.Limit == 0 {
		if d.Denied() {
			ps.headers.WriteUnavailable(h)
		}
		return
	}
	ps.headers.Write(h, headers.State{
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Denied:     d.Denied(),
	})
}

// refuse writes the response of a denied request: the WithDeniedHandler
// handler, or 429 Too Many Requests with a fixed body, or 503 Service
// Unavailable when the quota is unknown because the store failed under
// FailClosed. The body never says anything about the key, the store or the
// error.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, d Decision) {
	if l.denied != nil {
		l.denied.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
		return
	}
	status := http.StatusTooManyRequests
	if d.Limit == 0 {
		status = http.StatusServiceUnavailable
	}
	h := w.Header()
	h.Del("Content-Length") // a handler may have set one, as http.Error notes
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	body := bodyTooMany
	if status != http.StatusTooManyRequests {
		body = bodyUnavailable
	}
	_, _ = w.Write(body)
}

var (
	bodyTooMany     = []byte("too many requests\n")
	bodyUnavailable = []byte("service unavailable\n")
)
