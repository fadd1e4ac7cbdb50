package addrlimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// LogObserver logs who gets throttled, with log/slog: every Limited decision
// (enforced or dry run) and every decision that carries an error (a key
// warning such as a misconfigured proxy header, or a store failure). Exempt
// and plain allowed requests are not logged.
//
// Volume stays bounded under a flood: at most one line per key per interval;
// the next line for that key reports how many were suppressed in between. At
// most maxLogKeys keys are tracked at once; beyond that, events share one
// pseudo-key, so the whole flood costs a few lines per interval. Every
// logged string is cut to at most maxLogField bytes, so a request with a
// megabyte path costs a line of normal size.
//
// Each line has the attributes policy, key, method, route (the ServeMux
// pattern when set, else the URL path, never the query), outcome, mode
// ("enforced" or "dry_run"), cost, remaining, retry_after (rounded up to
// whole seconds), credentialed (the request carried an Authorization header
// but was not exempt: a hint anyone can trigger), retired_token (it carried a
// retired internal secret: one of your services, for sure), suppressed, and
// error when there is one. Decisions of AllowKey have no method or route. It
// never logs header values, so tokens never reach the log. A limited request
// with a retired secret is logged at ERROR, one with other credentials at
// WARN, the rest at INFO.
//
// A LogObserver is safe for concurrent use. Pass its Observe method to
// WithObserver.
type LogObserver struct {
	logger *slog.Logger
	every  time.Duration

	mu         sync.Mutex
	keys       map[string]*logState
	nextForget time.Time // a full table is swept at most once per interval
}

type logState struct {
	next       time.Time // earliest time of the next line
	suppressed uint64
}

// maxLogKeys bounds the keys a LogObserver tracks.
const maxLogKeys = 1000

// maxLogField bounds each string a LogObserver logs, in bytes.
const maxLogField = 256

// overflowLogKey stands for all keys beyond maxLogKeys.
const overflowLogKey = "addrlimit:other-keys"

// NewLogObserver returns a LogObserver that writes to logger at most one line
// per key per every (which must be positive; a minute suits most services).
func NewLogObserver(logger *slog.Logger, every time.Duration) (*LogObserver, error) {
	if logger == nil {
		return nil, errors.New("addrlimit: NewLogObserver given a nil logger")
	}
	if every <= 0 {
		return nil, errors.New("addrlimit: NewLogObserver interval must be positive")
	}
	return &LogObserver{logger: logger, every: every, keys: make(map[string]*logState)}, nil
}

// Observe logs d if it is worth a line. Use it with WithObserver. r may be
// nil (decisions of AllowKey).
func (o *LogObserver) Observe(r *http.Request, d Decision) {
	if d.Outcome != Limited && d.Err == nil {
		return
	}
	key := truncate(d.Key, maxLogField)
	suppressed, ok := o.admit(key, time.Now())
	if !ok {
		return
	}
	var method, route string
	credentialed := false
	if r != nil {
		method, route = r.Method, r.Pattern
		if route == "" && r.URL != nil {
			route = r.URL.Path
		}
		credentialed = len(r.Header["Authorization"]) > 0
	}
	level, msg := slog.LevelInfo, "addrlimit: request limited"
	switch {
	case d.Outcome != Limited:
		level, msg = slog.LevelWarn, "addrlimit: degraded decision"
	case d.RetiredToken:
		level, msg = slog.LevelError, "addrlimit: request with a retired internal token limited"
	case credentialed:
		level, msg = slog.LevelWarn, "addrlimit: request with credentials limited"
	}
	mode := "enforced"
	if d.DryRun {
		mode = "dry_run"
	}
	attrs := []slog.Attr{
		slog.String("policy", d.Policy),
		slog.String("key", key),
		slog.String("method", truncate(method, maxLogField)),
		slog.String("route", truncate(route, maxLogField)),
		slog.String("outcome", d.Outcome.String()),
		slog.String("mode", mode),
		slog.Int("cost", d.Cost),
		slog.Int("remaining", d.Remaining),
		slog.Duration("retry_after", time.Duration(headers.Seconds(d.RetryAfter))*time.Second), // whole seconds, as in Retry-After
		slog.Bool("credentialed", credentialed),
		slog.Bool("retired_token", d.RetiredToken),
		slog.Uint64("suppressed", suppressed),
	}
	if d.Degraded {
		attrs = append(attrs, slog.Bool("degraded", true))
	}
	if d.Err != nil {
		attrs = append(attrs, slog.String("error", truncate(d.Err.Error(), maxLogField)))
	}
	o.logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence,
// marking the cut with "…" (within the n bytes).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// admit decides whether key may log at now, returning how many lines were
// suppressed for it since its last one.
func (o *LogObserver) admit(key string, now time.Time) (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st, ok := o.keys[key]
	if !ok {
		if len(o.keys) >= maxLogKeys && !now.Before(o.nextForget) {
			o.forget(now)
			o.nextForget = now.Add(o.every)
		}
		if len(o.keys) >= maxLogKeys {
			key = overflowLogKey
			st = o.keys[key]
		}
		if st == nil {
			st = &logState{}
			o.keys[key] = st
		}
	}
	if now.Before(st.next) {
		st.suppressed++
		return 0, false
	}
	n := st.suppressed
	st.suppressed, st.next = 0, now.Add(o.every)
	return n, true
}

// forget drops the keys whose interval is over; their suppressed counts move
// to the overflow pseudo-key, to be reported in its next line.
func (o *LogObserver) forget(now time.Time) {
	var moved uint64
	for k, st := range o.keys {
		if k != overflowLogKey && !now.Before(st.next) {
			moved += st.suppressed
			delete(o.keys, k)
		}
	}
	if moved > 0 {
		st := o.keys[overflowLogKey]
		if st == nil {
			st = &logState{}
			o.keys[overflowLogKey] = st
		}
		st.suppressed += moved
	}
}
