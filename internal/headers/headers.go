// Package headers renders addrlimit's response header fields. Everything that
// does not depend on the request is rendered once per limiter, and the value
// slices come from a small arena, so that setting the quota fields of an
// allowed request usually allocates nothing.
package headers

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// arena hands out value slots for header maps. Each slot belongs to exactly
// one response: no two responses ever share a mutable []string element, so a
// handler that edits its own header values in place cannot affect another
// response. Slots are carved from chunks, one allocation per chunkSlots
// values instead of one per response. Chunks circulate through a sync.Pool,
// which hands a chunk to one goroutine at a time and keeps chunks local to a
// processor, so concurrent requests neither contend nor share cache lines. A
// used-up chunk is dropped and freed by the garbage collector once no
// response refers to it. Safe for concurrent use; the zero value is ready.
type arena struct {
	pool sync.Pool // of *chunk
}

const chunkSlots = 128

type chunk struct {
	vals [chunkSlots]string
	used int // owned by whoever holds the chunk
}

// take returns n fresh, zeroed slots (n <= chunkSlots).
func (a *arena) take(n int) []string {
	c, _ := a.pool.Get().(*chunk)
	if c == nil || c.used+n > chunkSlots {
		c = new(chunk)
	}
	v := c.vals[c.used : c.used+n : c.used+n]
	if c.used += n; c.used < chunkSlots {
		a.pool.Put(c)
	}
	return v
}

// Style selects the quota header fields.
type Style uint8

const (
	// Draft sends RateLimit-Policy and RateLimit (IETF httpapi draft, structured fields).
	Draft Style = iota
	// XRateLimit sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until the bucket is full again).
	XRateLimit
	// None sends no quota fields.
	None
)

// Canonical field names, so that http.Header needs no canonicalisation.
const (
	fieldPolicy     = "Ratelimit-Policy"
	fieldRateLimit  = "Ratelimit"
	fieldXLimit     = "X-Ratelimit-Limit"
	fieldXRemaining = "X-Ratelimit-Remaining"
	fieldXReset     = "X-Ratelimit-Reset"
	fieldRetryAfter = "Retry-After"
	fieldCache      = "Cache-Control"
)

// precomputed bounds the tables of pre-rendered values per limiter.
const precomputed = 1024

var smallInts = func() []string {
	s := make([]string, precomputed+1)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func itoa(n int) string {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}

// Seconds rounds d up to whole seconds.
func Seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// State is what the fields report about one decision.
type State struct {
	Remaining  int
	RetryAfter time.Duration // until the next token; zero while Remaining > 0
	ResetAfter time.Duration // until the bucket is full
	Denied     bool          // adds Retry-After and Cache-Control: no-store
}

// Writer sets the fields of one limiter. It is immutable and safe for
// concurrent use.
type Writer struct {
	style    Style
	policy   string   // RateLimit-Policy value
	limit    string   // X-RateLimit-Limit value
	byRemain []string // RateLimit values for r = index, t = 0
	byWait   []string // RateLimit values for r = 0, t = index
	item     string   // the policy name as a structured-field string: "name"
	arena    arena
}

// New pre-renders the fields of the policy called name (A-Z a-z 0-9 . _ -,
// which a structured-field string holds without escaping) for a bucket of
// capacity burst refilled one token per interval.
func New(style Style, name string, burst int, interval time.Duration) *Writer {
	w := &Writer{style: style, limit: itoa(burst), item: `"` + name + `"`}
	if style != Draft {
		return w
	}
	window := max(Seconds(time.Duration(burst)*interval), 1)
	w.policy = w.item + ";q=" + itoa(burst) + ";w=" + itoa(window)
	w.byRemain = make([]string, min(burst, precomputed)+1)
	for r := range w.byRemain {
		w.byRemain[r] = w.renderRateLimit(r, 0)
	}
	w.byWait = make([]string, min(Seconds(interval), precomputed)+1)
	for t := range w.byWait {
		w.byWait[t] = w.renderRateLimit(0, t)
	}
	return w
}

func (w *Writer) renderRateLimit(r, t int) string {
	return w.item + ";r=" + strconv.Itoa(r) + ";t=" + strconv.Itoa(t)
}

// Write sets the fields for s on h, replacing earlier values.
func (w *Writer) Write(h http.Header, s State) {
	n := 0
	switch w.style {
	case Draft:
		n = 2
	case XRateLimit:
		n = 3
	}
	if s.Denied {
		n += 2
	}
	if n == 0 {
		return
	}
	vals := w.arena.take(n)
	i := 0
	set := func(name, v string) {
		vals[i] = v
		h[name] = vals[i : i+1 : i+1]
		i++
	}
	wait := 0
	if s.Remaining == 0 {
		wait = max(Seconds(s.RetryAfter), 1)
	}
	switch w.style {
	case Draft:
		set(fieldPolicy, w.policy)
		set(fieldRateLimit, w.rateLimit(s.Remaining, wait))
	case XRateLimit:
		set(fieldXLimit, w.limit)
		set(fieldXRemaining, itoa(s.Remaining))
		set(fieldXReset, itoa(Seconds(s.ResetAfter)))
	}
	if s.Denied {
		set(fieldRetryAfter, itoa(max(Seconds(s.RetryAfter), 1)))
		set(fieldCache, "no-store")
	}
}

func (w *Writer) rateLimit(r, t int) string {
	if t == 0 && r < len(w.byRemain) {
		return w.byRemain[r]
	}
	if r == 0 && t < len(w.byWait) {
		return w.byWait[t]
	}
	return w.renderRateLimit(r, t)
}

// WriteUnavailable sets the fields of a 503 sent because the store failed:
// no quota (it is unknown), Retry-After: 1 and Cache-Control: no-store.
func (w *Writer) WriteUnavailable(h http.Header) {
	vals := w.arena.take(2)
	vals[0], vals[1] = "1", "no-store"
	h[fieldRetryAfter] = vals[0:1:1]
	h[fieldCache] = vals[1:2:2]
}
