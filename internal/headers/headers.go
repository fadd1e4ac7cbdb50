// Package headers renders addrlimit's response header fields. Everything that
// does not depend on the request is rendered once per policy; what does (the
// remaining quota, the waits) comes from tables for small values and is
// rendered into arena memory for the others, so that setting the fields of a
// response allocates nothing on its own, whatever the limit.
package headers

import (
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"
)

// The styles of quota header fields, as addrlimit.HeaderStyle numbers them
// (the root package's HeaderStyle is the one style type; these are its
// values).
const (
	// Draft sends RateLimit-Policy and RateLimit (IETF httpapi draft, structured fields).
	Draft = iota
	// XRateLimit sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until the bucket is full again).
	XRateLimit
	// None sends no quota fields.
	None
)

// Canonical field names, so that http.Header needs no canonicalisation.
const (
	fieldPolicy      = "Ratelimit-Policy"
	fieldRateLimit   = "Ratelimit"
	fieldXLimit      = "X-Ratelimit-Limit"
	fieldXRemaining  = "X-Ratelimit-Remaining"
	fieldXReset      = "X-Ratelimit-Reset"
	fieldRetryAfter  = "Retry-After"
	fieldCache       = "Cache-Control"
	fieldType        = "Content-Type"
	fieldTypeOptions = "X-Content-Type-Options"
	fieldLength      = "Content-Length"
)

// Constant values, the same as http.Error's.
const (
	noStore   = "no-store"
	plainText = "text/plain; charset=utf-8"
	noSniff   = "nosniff"
)

// precomputed bounds the tables of pre-rendered values per Writer. Larger
// values are rendered per response into arena memory: a little slower than a
// table, still without an allocation of their own.
const precomputed = 1024

// smallInts holds the decimal forms of 0..precomputed, shared by all Writers.
var smallInts = func() []string {
	s := make([]string, precomputed+1)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// Seconds rounds d up to whole seconds.
func Seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d-1)/time.Second) + 1
}

// State is what the fields report about one decision: the bucket (Remaining,
// NextToken, ResetAfter: the quota fields, unless Unknown) and, for a denied
// request, the request (RetryAfter: the Retry-After field). With several
// limits, the bucket is the limit Tight (the X-RateLimit fields), and Each
// gives every limit (the RateLimit field).
type State struct {
	Remaining  int
	NextToken  time.Duration // the bucket's wait for one whole token (RateLimit's t); zero while Remaining > 0
	RetryAfter time.Duration // the request's wait for its cost (Retry-After), when Denied
	ResetAfter time.Duration // until the bucket is full
	Denied     bool          // adds Retry-After and Cache-Control: no-store
	Never      bool          // with Denied: no wait lets the request succeed, so no Retry-After
	Unknown    bool          // the quota is unknown (the store failed): no quota fields
	Tight      int           // several limits: the index of the limit the fields above describe
	Each       []Member      // several limits: each limit, in the order given to NewMulti
}

// Member is one limit of several as the RateLimit field reports it.
type Member struct {
	Remaining int
	NextToken time.Duration // its wait for one whole token; zero while Remaining > 0
}

// Limit is one limit of a policy, as NewMulti gets it.
type Limit struct {
	Name     string // its list member is "<policy>-<Name>"
	Burst    int
	Interval time.Duration
}

// Writer sets the fields of one policy. It is immutable after New and safe
// for concurrent use.
//
// Values come from tables where they can: remaining counts up to
// precomputed, the topRendered counts just below the burst (what a client
// whose bucket is full or nearly full sees: in practice, most clients), waits
// up to precomputed seconds. Other values are rendered into arena memory.
type Writer struct {
	style   uint8
	policy  string   // RateLimit-Policy value
	prefix  string   // RateLimit value up to r's digits: "name";r=
	limit   string   // X-RateLimit-Limit value
	low     []string // for remaining = index, wait 0: the RateLimit value (Draft) or the decimal (XRateLimit)
	top     []string // the same for remaining = topFrom+index
	topFrom int
	byWait  []string  // RateLimit values for remaining 0, wait = index
	each    []*Writer // several limits: a Writer per limit, whose arenas stay unused
	arena   arena
}

// topRendered is how many remaining counts just below the burst (burst
// included) each Writer pre-renders.
const topRendered = 128

// NewMulti is New for a policy of several limits (with one, it is New):
// the RateLimit-Policy and RateLimit fields hold one list member per limit,
// named "<name>-<limit name>" (draft-12), and the X-RateLimit fields report
// the limit State.Tight. Each member's name must pass CheckName; New's
// rules for a limit apply to each. With none, it sets no quota field.
func NewMulti(style uint8, name string, limits []Limit) *Writer {
	switch len(limits) {
	case 0: // a policy without rate limits: no quota field, ever
		return &Writer{style: None}
	case 1:
		return New(style, name, limits[0].Burst, limits[0].Interval)
	}
	w := &Writer{style: style}
	for i, lim := range limits {
		sub := New(style, name+"-"+lim.Name, lim.Burst, lim.Interval)
		w.each = append(w.each, sub)
		if i > 0 {
			w.policy += ", "
		}
		w.policy += sub.policy
	}
	return w
}

// Lists reports whether w reports several limits in a list (Draft style,
// several limits): only then does Write read State.Each.
func (w *Writer) Lists() bool { return w.each != nil && w.style == Draft }

// New pre-renders the fields of the policy called name: a bucket of
// capacity burst refilled one token per interval, in style (Draft,
// XRateLimit or None). The caller validates the policy: CheckName(name),
// burst >= 1 and interval > 0. New panics otherwise; addrlimit.New never lets such a
// policy through, so the panic can only mean a bug in the caller, and it
// happens at construction, never while serving.
func New(style uint8, name string, burst int, interval time.Duration) *Writer {
	if err := CheckName(name); err != nil {
		panic("headers: " + err.Error())
	}
	if burst < 1 || interval <= 0 {
		panic(fmt.Sprintf("headers: invalid policy %d per %v", burst, interval))
	}
	w := &Writer{style: style, limit: strconv.Itoa(burst)}
	w.topFrom = max(burst-topRendered+1, precomputed+1)
	var render func(r int) string
	switch style {
	case Draft:
		w.policy = `"` + name + `";q=` + w.limit + ";w=" + strconv.Itoa(Window(burst, interval))
		w.prefix = `"` + name + `";r=`
		render = func(r int) string { return w.prefix + strconv.Itoa(r) + ";t=0" }
		w.byWait = make([]string, min(Seconds(interval), precomputed)+1)
		for t := range w.byWait {
			w.byWait[t] = w.prefix + "0;t=" + strconv.Itoa(t)
		}
	case XRateLimit:
		render = strconv.Itoa
	default:
		return w
	}
	if style == XRateLimit {
		w.low = smallInts[:min(burst, precomputed)+1]
	} else {
		w.low = make([]string, min(burst, precomputed)+1)
		for r := range w.low {
			w.low[r] = render(r)
		}
	}
	for r := w.topFrom; r <= burst; r++ {
		w.top = append(w.top, render(r))
	}
	return w
}

// remaining returns the pre-rendered value for r remaining and no wait, if
// there is one.
func (w *Writer) remaining(r int) (string, bool) {
	if r < len(w.low) {
		return w.low[r], true
	}
	if i := r - w.topFrom; i >= 0 && i < len(w.top) {
		return w.top[i], true
	}
	return "", false
}

// Window is the draft's w parameter: the whole seconds a full bucket takes
// to refill, rounded up, at least 1; 2^62 if that does not fit.
func Window(burst int, interval time.Duration) int {
	hi, lo := bits.Mul64(uint64(burst), uint64(interval))
	if hi >= uint64(time.Second) {
		return 1 << 62
	}
	secs, rem := bits.Div64(hi, lo, uint64(time.Second))
	if rem != 0 {
		secs++
	}
	return int(min(max(secs, 1), 1<<62))
}

// MaxNameLen bounds the length of a policy name.
const MaxNameLen = 64

// CheckName is the one rule for policy names, of addrlimit.New and of this
// package: 1 to 64 bytes of A-Z a-z 0-9 . _ -, so that a name needs no
// escaping in a structured-field string, a metric label or a store key.
func CheckName(name string) error {
	if name == "" {
		return errors.New("policy name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("policy name is %d bytes, longer than the maximum of %d", len(name), MaxNameLen)
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("policy name %q has a character outside A-Z a-z 0-9 . _ -", name)
		}
	}
	return nil
}

// Sets reports whether Write sets any field for s: not for an allowed
// request under None or with an unknown quota.
func (w *Writer) Sets(s *State) bool {
	return s.Denied || !s.Unknown && w.style != None
}

// Write sets the fields for s on h, replacing earlier values. s is read
// only. The States of this package go by pointer: a State copied right
// after it was written stalls on store forwarding, a cost the allowed path
// measured (BenchmarkAllowedOptions of the root package).
func (w *Writer) Write(h http.Header, s *State) {
	w.write(h, s, 0)
}

// WriteDenied is Write for a denied response that gets the default refusal
// body (Limiter without WithDeniedHandler): it also prepares h for the body,
// as http.Error does (Content-Type text/plain, X-Content-Type-Options:
// nosniff, no Content-Length), from one arena reservation, and returns the
// body to write after WriteHeader(status): the lower-case status text and a
// newline ("too many requests\n"), shared by all responses, so Write must
// not modify it (the io.Writer contract). s.Denied should be set.
func (w *Writer) WriteDenied(h http.Header, s *State, status int) []byte {
	return w.write(h, s, status)
}

// write sets the fields of s and, when status is not zero, those of a
// refusal with that status, whose body it returns.
func (w *Writer) write(h http.Header, s *State, status int) []byte {
	style := w.style
	if s.Unknown {
		style = None
	}
	n := 0
	switch style {
	case Draft:
		n = 2
	case XRateLimit:
		n = 3
	}
	if s.Denied {
		n += 2
	}
	if status != 0 {
		n += 2
	}
	if n == 0 {
		return nil
	}
	if status != 0 {
		dropLength(h)
	}
	c := w.arena.get(n)
	var q quotaFields
	w.quota(c, style, s, &q)
	for i := range q.n {
		c.set(h, names[q.field[i]].canonical, q.value[i])
	}
	if s.Denied {
		if !s.Never {
			c.set(h, fieldRetryAfter, c.itoa(max(Seconds(s.RetryAfter), 1)))
		}
		c.set(h, fieldCache, noStore)
	}
	var body []byte
	if status != 0 {
		body = refusal(h, c, status)
	}
	w.arena.put(c)
	return body
}

// Fields calls set with the lower-case name (as HTTP/2 and gRPC metadata
// carry it) and the value of each quota field that Write sets for s, in the
// order Write sets them: none when s.Unknown or under None. The values are
// those of Write, rendered by the same code (quota).
func (w *Writer) Fields(s *State, set func(name, value string)) {
	if s.Unknown || w.style == None {
		return
	}
	c := w.arena.get(0)
	var q quotaFields
	w.quota(c, w.style, s, &q)
	w.arena.put(c)
	for i := range q.n {
		set(names[q.field[i]].lower, q.value[i])
	}
}

// A field is a quota field's index in names.
type field uint8

const (
	policyField field = iota
	rateLimitField
	xLimitField
	xRemainingField
	xResetField
)

// names are the quota fields' names: canonical for http.Header, lower case
// for Fields.
var names = [...]struct{ canonical, lower string }{
	policyField:     {fieldPolicy, "ratelimit-policy"},
	rateLimitField:  {fieldRateLimit, "ratelimit"},
	xLimitField:     {fieldXLimit, "x-ratelimit-limit"},
	xRemainingField: {fieldXRemaining, "x-ratelimit-remaining"},
	xResetField:     {fieldXReset, "x-ratelimit-reset"},
}

// quotaFields are the quota fields of one response, in order.
type quotaFields struct {
	n     int
	field [3]field
	value [3]string
}

// quota renders the quota fields of s in style (Draft or XRateLimit; none
// otherwise) into q, a zero quotaFields, from the tables or into c: the one
// rendering behind Write and Fields.
func (w *Writer) quota(c *chunk, style uint8, s *State, q *quotaFields) {
	remaining := max(s.Remaining, 0)
	switch style {
	case Draft:
		q.n = 2
		q.field[0], q.value[0] = policyField, w.policy
		if w.each != nil {
			q.field[1], q.value[1] = rateLimitField, c.list(w.each, s.Each)
			break
		}
		q.field[1], q.value[1] = rateLimitField, w.rateLimit(c, remaining, wait(remaining, s.NextToken))
	case XRateLimit:
		x := w
		if w.each != nil {
			x = w.each[s.Tight]
		}
		v, ok := x.remaining(remaining)
		if !ok {
			v = c.itoa(remaining)
		}
		q.n = 3
		q.field[0], q.value[0] = xLimitField, x.limit
		q.field[1], q.value[1] = xRemainingField, v
		q.field[2], q.value[2] = xResetField, c.itoa(Seconds(s.ResetAfter))
	}
}

// wait is the RateLimit t of a limit with remaining tokens whose wait for
// one whole token is next: 0 while it holds one, else at least 1.
func wait(remaining int, next time.Duration) int {
	if remaining > 0 {
		return 0
	}
	return max(Seconds(next), 1)
}

// rateLimit returns the RateLimit value for r and t.
func (w *Writer) rateLimit(c *chunk, r, t int) string {
	if t == 0 {
		if v, ok := w.remaining(r); ok {
			return v
		}
	}
	if r == 0 && t < len(w.byWait) {
		return w.byWait[t]
	}
	return c.rateLimit(w.prefix, r, t)
}

// dropLength deletes a Content-Length that a handler may have set, as
// http.Error does. Call it before setting fields: on a map that is still
// empty, the usual case, it costs nothing.
func dropLength(h http.Header) {
	if len(h) > 0 {
		delete(h, fieldLength)
	}
}

func refusal(h http.Header, c *chunk, status int) []byte {
	c.set(h, fieldType, plainText)
	c.set(h, fieldTypeOptions, noSniff)
	return body(status)
}

var (
	bodyTooMany     = []byte("too many requests\n")
	bodyTooLarge    = []byte("content too large\n")
	bodyUnavailable = []byte("service unavailable\n")
	bodyRefused     = []byte("request refused\n")
)

// body returns the default refusal body for status, shared by all
// responses (do not modify it): its lower-case status text and a newline for
// the statuses a Limiter refuses with (413, 429, 503), a generic line for
// any other.
func body(status int) []byte {
	switch status {
	case http.StatusTooManyRequests:
		return bodyTooMany
	case http.StatusRequestEntityTooLarge:
		return bodyTooLarge
	case http.StatusServiceUnavailable:
		return bodyUnavailable
	}
	return bodyRefused
}
