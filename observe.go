package addrlimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// LogObserver logs, with log/slog (pass Observe to WithObserver), Limited
// decisions and those with an error: one line per key per interval at
// most, counting the suppressed, for 1,000 keys (then one pseudo-key) plus
// 100 for retired secrets. Attributes (docs/observability.md) never hold a
// header value; limit is "in-flight" for Decision.InFlightLimited, whose
// lines name the keys holding the most slots. Retired secrets log at
// ERROR, other credentials and degraded decisions at WARN, the rest at
// INFO. The zero value logs to slog.Default() once per key per minute.
type LogObserver struct {
	logger *slog.Logger  // nil: slog.Default()
	every  time.Duration // 0: defaultLogEvery

	mu      sync.Mutex
	keys    logTable // every line but those of retired secrets
	retired logTable // limited requests with a retired secret: never hidden by the others
}

// defaultLogEvery is the interval of the zero LogObserver.
const defaultLogEvery = time.Minute

// logTable is the suppression state of one kind of line: per key, bounded.
type logTable struct {
	keys       map[string]*logState
	nextForget time.Time // a full table is swept at most once per interval
}

type logState struct {
	next       time.Time // earliest time of the next line
	suppressed uint64
}

// inFlightLimitName is what a LogObserver logs as the limit of a request
// the in-flight limit refused.
const inFlightLimitName = "in-flight"

// maxLogKeys bounds the keys a LogObserver tracks for lines other than
// those of retired secrets.
const maxLogKeys = 1000

// maxRetiredLogKeys bounds the keys a LogObserver tracks for lines of
// limited requests with a retired secret. Only your own services (or
// whoever holds a leaked old secret) send one, so a few keys is the norm.
const maxRetiredLogKeys = 100

// maxLogField bounds each string a LogObserver logs, in bytes.
const maxLogField = 256

// overflowLogKey stands for all keys beyond maxLogKeys.
const overflowLogKey = "addrlimit:other-keys"

// NewLogObserver returns a LogObserver writing to logger at most one line per
// key per every (positive).
func NewLogObserver(logger *slog.Logger, every time.Duration) (*LogObserver, error) {
	if logger == nil {
		return nil, errors.New("addrlimit: NewLogObserver given a nil logger")
	}
	if every <= 0 {
		return nil, errors.New("addrlimit: NewLogObserver interval must be positive")
	}
	return &LogObserver{logger: logger, every: every}, nil
}

// Observe logs d, decided in ctx, if it is worth a line.
func (o *LogObserver) Observe(ctx context.Context, d Decision) {
	if d.Outcome != Limited && d.Err == nil {
		return
	}
	key := truncate(d.Key, maxLogField)
	table, tracked := &o.keys, maxLogKeys
	if d.Outcome == Limited && d.RetiredToken {
		table, tracked = &o.retired, maxRetiredLogKeys
	}
	every := o.every
	if every <= 0 {
		every = defaultLogEvery
	}
	o.mu.Lock()
	suppressed, ok := table.admit(key, time.Now(), every, tracked)
	o.mu.Unlock()
	if !ok {
		return
	}
	level, msg := slog.LevelInfo, "addrlimit: request limited"
	switch {
	case d.Outcome != Limited && d.Degraded:
		level, msg = slog.LevelWarn, "addrlimit: degraded decision"
	case d.Outcome != Limited:
		level, msg = slog.LevelWarn, "addrlimit: decision with an error"
	case d.RetiredToken:
		level, msg = slog.LevelError, "addrlimit: request with a retired internal token limited"
	case d.Credentialed:
		level, msg = slog.LevelWarn, "addrlimit: request with credentials limited"
	}
	mode := "enforced"
	if d.DryRun {
		mode = "dry_run"
	}
	limit := d.Limit().Name
	if d.InFlightLimited {
		limit = inFlightLimitName
	}
	attrs := []slog.Attr{
		slog.String("policy", d.Policy),
		slog.String("limit", limit),
		slog.String("key", key),
		slog.String("route", truncate(d.Route, maxLogField)),
		slog.String("outcome", d.Outcome.String()),
		slog.String("mode", mode),
		slog.Int("cost", d.Cost),
		slog.Int("remaining", d.Remaining),
		slog.Duration("retry_after", time.Duration(headers.Seconds(d.RetryAfter))*time.Second), // whole seconds, as in Retry-After
		slog.Bool("credentialed", d.Credentialed),
		slog.Bool("retired_token", d.RetiredToken),
		slog.Uint64("suppressed", suppressed),
	}
	if d.InFlight > 0 {
		attrs = append(attrs, slog.Int("in_flight", d.InFlight))
	}
	if d.Identity != "" {
		attrs = append(attrs, slog.String("identity", d.Identity))
	}
	if d.Degraded {
		attrs = append(attrs, slog.Bool("degraded", true))
	}
	if d.Err != nil {
		attrs = append(attrs, slog.String("error", truncate(d.Err.Error(), maxLogField)))
	}
	logger := o.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, level, msg, attrs...)
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
// suppressed for it since its last one. It tracks at most tracked keys, the
// overflow pseudo-key aside. The caller holds the LogObserver's lock.
func (t *logTable) admit(key string, now time.Time, every time.Duration, tracked int) (uint64, bool) {
	if t.keys == nil {
		t.keys = make(map[string]*logState)
	}
	st, ok := t.keys[key]
	if !ok {
		if len(t.keys) >= tracked && !now.Before(t.nextForget) {
			t.forget(now)
			t.nextForget = now.Add(every)
		}
		if len(t.keys) >= tracked {
			key = overflowLogKey
			st = t.keys[key]
		}
		if st == nil {
			st = &logState{}
			t.keys[key] = st
		}
	}
	if now.Before(st.next) {
		st.suppressed++
		return 0, false
	}
	n := st.suppressed
	st.suppressed, st.next = 0, now.Add(every)
	return n, true
}

// forget drops the keys whose interval is over; their suppressed counts move
// to the overflow pseudo-key, to be reported in its next line.
func (t *logTable) forget(now time.Time) {
	var moved uint64
	for k, st := range t.keys {
		if k != overflowLogKey && !now.Before(st.next) {
			moved += st.suppressed
			delete(t.keys, k)
		}
	}
	if moved > 0 {
		st := t.keys[overflowLogKey]
		if st == nil {
			st = &logState{}
			t.keys[overflowLogKey] = st
		}
		st.suppressed += moved
	}
}
