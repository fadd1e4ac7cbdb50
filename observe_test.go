package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recorder) WithGroup(string) slog.Handler      { return h }

func (h *recorder) lines() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		m := map[string]string{"msg": r.Message, "level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

func (h *recorder) text() string { return fmt.Sprint(h.lines()) }

func logLimiter(t *testing.T, limit int, opts ...addrlimit.Option) (http.Handler, *recorder) {
	t.Helper()
	rec := &recorder{}
	lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
	require.NoError(t, err)
	lim := mustNew(t, limit, time.Hour, append(opts, addrlimit.WithObserver(lo.Observe))...)
	return lim.Handler(okHandler), rec
}

func TestLogObserverFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1)
		serve(h, req("192.0.2.1:1"))
		require.Empty(t, rec.lines(), "an allowed request was logged")
		r := req("192.0.2.1:1", "Authorization", "Bearer stale-token-0123456789abc")
		r.Method = "POST"
		r.URL.Path = "/v1/progress"
		r.URL.RawQuery = "session=secret-query"
		serve(h, r)
		lines := rec.lines()
		require.Len(t, lines, 1)
		want := map[string]string{
			"msg": "addrlimit: request with credentials limited", "level": "WARN",
			"key": "192.0.2.1", "route": "/v1/progress", "outcome": "limited",
			"mode": "enforced", "remaining": "0", "retry_after": "1h0m0s", "credentialed": "true", "suppressed": "0",
			"policy": "default", "limit": "1h", "cost": "1", "retired_token": "false",
		}
		for k, v := range want {
			assert.Equal(t, v, lines[0][k], "field %s", k)
		}
		assert.Len(t, lines[0], len(want), "attributes: %v", lines[0])
		assert.NotContains(t, rec.text(), "secret-query", "the query string was logged")
	})
}

func TestLogObserverDryRunAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1, addrlimit.WithDryRun())
		serve(h, req("192.0.2.1:1"))
		serve(h, req("192.0.2.1:1"))
		serve(h, req("not-an-address")) // key error, allowed: logged as a decision with an error
		lines := rec.lines()
		require.Len(t, lines, 2, "lines: %v", lines)
		assert.Equal(t, "dry_run", lines[0]["mode"], "dry-run line %v", lines[0])
		assert.Equal(t, "false", lines[0]["credentialed"], "dry-run line %v", lines[0])
		assert.Equal(t, "INFO", lines[0]["level"], "dry-run line %v", lines[0])
		assert.Equal(t, addrlimit.UnkeyedKey, lines[1]["key"], "key-error line %v", lines[1])
		assert.NotEmpty(t, lines[1]["error"], "key-error line %v", lines[1])
		assert.Equal(t, "allowed", lines[1]["outcome"], "key-error line %v", lines[1])
	})
}

func TestLogObserverBoundsEveryField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		huge := strings.Repeat("é", 1<<19) // 1 MiB of two-byte runes
		kf := func(*http.Request) (string, error) { return "k" + huge, errors.New("e" + huge) }
		h, rec := logLimiter(t, 1, addrlimit.WithKeyFunc(kf))
		r := req("192.0.2.1:1")
		r.URL.Path = "/" + huge
		r.Method = "M" + strings.Repeat("X", 1<<20)
		serve(h, r)
		serve(h, r)
		lines := rec.lines()
		require.Len(t, lines, 1, "one line per key per interval")
		for _, line := range lines {
			total := 0
			for k, v := range line {
				require.LessOrEqual(t, len(v), 256, "field %s", k)
				require.True(t, utf8.ValidString(v), "field %s cut inside a rune", k)
				total += len(v)
			}
			assert.Less(t, total, 2048, "a line of normal size")
			assert.True(t, strings.HasSuffix(line["route"], "…"))
		}
	})
}

func TestLogObserverRetiredTokenAndKeyedDecisions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok, err := mustToken(t, secret).WithRetired(retiredSecret)
		require.NoError(t, err)
		rec := &recorder{}
		lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
		require.NoError(t, err)
		lim := mustNew(t, 1, time.Hour, addrlimit.WithInternalToken(tok), addrlimit.WithObserver(lo.Observe))
		h := lim.Handler(okHandler)
		serve(h, req("10.0.0.1:1", "Authorization", "Bearer "+retiredSecret))
		serve(h, req("10.0.0.1:1", "Authorization", "Bearer "+retiredSecret))
		lim.AllowKey(context.Background(), "", "job-queue", 1)
		lim.AllowKey(context.Background(), "", "job-queue", 1)
		lines := rec.lines()
		require.Len(t, lines, 2)
		assert.Equal(t, "ERROR", lines[0]["level"])
		assert.Equal(t, "addrlimit: request with a retired internal token limited", lines[0]["msg"])
		assert.Equal(t, "true", lines[0]["retired_token"])
		assert.NotContains(t, rec.text(), retiredSecret)
		assert.Equal(t, "job-queue", lines[1]["key"])
		assert.Equal(t, "", lines[1]["route"], "a keyed decision names no route")
		assert.Equal(t, "INFO", lines[1]["level"])
	})
}

func TestLogObserverBoundsAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 5)
		r := req("198.51.100.66:1")
		for range 100_000 {
			serve(h, r)
		}
		require.Len(t, rec.lines(), 1, "a flood from one key, lines in one interval")
		time.Sleep(time.Minute)
		serve(h, r)
		lines := rec.lines()
		require.Len(t, lines, 2, "lines after the next interval")
		assert.Equal(t, fmt.Sprint(100_000-5-1), lines[1]["suppressed"], "next interval: %v", lines[1])
	})
}

func TestLogObserverBoundsAFloodOfKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1)
		for i := range 20_000 {
			r := req(fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255))
			serve(h, r)
			serve(h, r) // limited
		}
		assert.LessOrEqual(t, len(rec.lines()), 1001, "lines 20,000 limited keys logged in one interval")
	})
}

func TestLogObserverNeverLogsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok := mustToken(t, secret)
		h, rec := logLimiter(t, 1, addrlimit.WithExempt(tok.Match))
		tokens := []string{
			"Bearer " + secret,                       // valid: exempt
			"Bearer forged-" + secret[7:],            // forged
			"Bearer " + secret + "%%%malformed",      // malformed
			"Basic dXNlcjpwYXNzd29yZC1zZWNyZXQ=",     // other scheme
			"Bearer " + strings.Repeat("Z", 600),     // too long
			"bearer " + strings.ToUpper(secret[:20]), // wrong case
		}
		for i, v := range tokens {
			for range 3 {
				serve(h, req(fmt.Sprintf("192.0.2.%d:1", i), "Authorization", v))
			}
		}
		text := rec.text()
		require.Len(t, rec.lines(), len(tokens)-1, "want one line per non-exempt key: %s", text)
		for _, v := range tokens {
			tokPart := v[strings.IndexByte(v, ' ')+1:]
			assert.NotContains(t, text, tokPart[:12], "a token reached the log")
		}
		assert.NotContains(t, text, secret[:12], "the secret reached the log")
	})
}

func TestNewLogObserverErrors(t *testing.T) {
	_, err := addrlimit.NewLogObserver(nil, time.Minute)
	assert.Error(t, err, "nil logger accepted")
	_, err = addrlimit.NewLogObserver(slog.Default(), 0)
	assert.Error(t, err, "zero interval accepted")
}

func TestObserver(t *testing.T) {
	tok := mustToken(t, secret)
	type seen struct {
		path string
		d    addrlimit.Decision
	}
	var got []seen
	lim := mustNew(t, 1, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { got = append(got, seen{d.Route, d}) }),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { got = append(got, seen{"second", d}) }))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-token-0123456789"))
	want := []addrlimit.Decision{
		{Outcome: addrlimit.Allowed, Key: "192.0.2.1", Remaining: 0, RetryAfter: time.Hour, ResetAfter: time.Hour},
		{Outcome: addrlimit.Exempt},
		{Outcome: addrlimit.Limited, Key: "192.0.2.1", Remaining: 0},
	}
	require.Len(t, got, 2*len(want), "observer calls")
	for i, w := range want {
		d := got[2*i].d
		require.Equal(t, "second", got[2*i+1].path, "observers out of order at %d", i)
		require.Equal(t, d, got[2*i+1].d, "observers told different decisions at %d", i)
		// RetryAfter and ResetAfter depend on the clock; check them apart.
		assert.Equal(t, w.Outcome, d.Outcome, "decision %d = %+v", i, d)
		assert.Equal(t, w.Key, d.Key, "decision %d = %+v", i, d)
		if w.Outcome != addrlimit.Exempt {
			assert.Equal(t, 1, d.Limit().Burst, "decision %d = %+v", i, d)
		}
		assert.Equal(t, w.Remaining, d.Remaining, "decision %d = %+v", i, d)
		if w.Outcome != addrlimit.Exempt {
			assert.Positive(t, d.RetryAfter, "decision %d RetryAfter", i)
			assert.LessOrEqual(t, d.RetryAfter, time.Hour, "decision %d RetryAfter", i)
		}
	}
	s := lim.Stats()
	assert.Equal(t, uint64(1), s.CredentialedLimited, "stats %+v", s)
	assert.Equal(t, uint64(1), s.Limited, "stats %+v", s)
	assert.Equal(t, uint64(1), s.Allowed, "stats %+v", s)
	assert.Equal(t, uint64(1), s.Exempt, "stats %+v", s)
}

func BenchmarkObserverOverhead(b *testing.B) {
	lo, _ := addrlimit.NewLogObserver(slog.New(slog.DiscardHandler), time.Minute)
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"none", nil},
		{"log", []addrlimit.Option{addrlimit.WithObserver(lo.Observe)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, 1_000_000_000, time.Second, append([]addrlimit.Option{addrlimit.WithBurst(300)}, tc.opts...)...)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
}

// retiredLines counts the ERROR lines of limited retired-secret requests.
func retiredLines(rec *recorder) int {
	n := 0
	for _, l := range rec.lines() {
		if l["level"] == "ERROR" && l["retired_token"] == "true" {
			n++
		}
	}
	return n
}

func TestLogObserverRetiredTokenLineSurvivesAnAttackerOnTheSameKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
		require.NoError(t, err)
		limited := addrlimit.Decision{Outcome: addrlimit.Limited, Policy: "default", Key: "198.51.100.7", Cost: 1}
		retired := limited
		retired.RetiredToken = true
		for minute := range 30 {
			// The attacker's requests come first and keep coming.
			for range 100 {
				lo.Observe(context.Background(), limited)
			}
			lo.Observe(context.Background(), retired)
			for range 100 {
				lo.Observe(context.Background(), limited)
			}
			require.Equal(t, minute+1, retiredLines(rec), "ERROR lines after minute %d", minute+1)
			time.Sleep(time.Minute)
		}
	})
}

func TestLogObserverRetiredTokenLineSurvivesAFloodOfOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
		require.NoError(t, err)
		ctx := context.Background()
		keys := make([]string, 2000)
		const minutes = 3 // the old observer logged the line in none of them
		for minute := range minutes {
			for second := range 60 {
				for i := range keys { // 2,000 new keys limited per second
					keys[i] = fmt.Sprintf("10.%d.%d.%d", minute, second, i)
					lo.Observe(ctx, addrlimit.Decision{Outcome: addrlimit.Limited, Key: keys[i], Cost: 1})
				}
				if second == 30 {
					lo.Observe(ctx, addrlimit.Decision{Outcome: addrlimit.Limited, Key: "192.0.2.5", Cost: 1, RetiredToken: true})
				}
				time.Sleep(time.Second)
			}
			require.Equal(t, minute+1, retiredLines(rec), "ERROR lines after minute %d", minute+1)
		}
		assert.LessOrEqual(t, len(rec.lines()), minutes*(1001+1), "lines in %d minutes", minutes)
	})
}

func TestLogObserverBoundsRetiredTokenLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
		require.NoError(t, err)
		for i := range 20_000 { // a leaked old secret used from 20,000 addresses
			lo.Observe(context.Background(), addrlimit.Decision{Outcome: addrlimit.Limited, Key: fmt.Sprint("k", i), Cost: 1, RetiredToken: true})
		}
		assert.Equal(t, 101, retiredLines(rec), "ERROR lines of 20,000 keys in one interval")
		time.Sleep(time.Minute)
		lo.Observe(context.Background(), addrlimit.Decision{Outcome: addrlimit.Limited, Key: "k-late", Cost: 1, RetiredToken: true})
		assert.Equal(t, 102, retiredLines(rec), "a new key in the next interval has its line")
	})
}

func TestLogObserverLogsThePathUnderACatchAllPattern(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1)
		mux := http.NewServeMux()
		mux.Handle("/", h) // the limiter in front of everything, as the FAQ advises
		for _, path := range []string{"/login", "/login", "/api/v1/items", "/api/v1/items"} {
			r := req("192.0.2.1:1")
			r.URL.Path = path
			serve(mux, r)
		}
		lines := rec.lines()
		require.Len(t, lines, 1, "one line per key per interval")
		assert.Equal(t, "/login", lines[0]["route"], "the path, not the pattern: %v", lines[0])
	})
}

// An allowed decision with an error is a WARN line: "degraded decision" with
// degraded=true when the store failed, "decision with an error" without the
// degraded attribute for a key warning.
func TestLogObserverLevelsOfAllowedDecisionsWithAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFailingStore()
		h, rec := logLimiter(t, 5, addrlimit.WithStore(s))
		serve(h, req("not-an-address")) // key warning
		s.down.Store(true)
		serve(h, req("192.0.2.1:1")) // store failure, FailLocal allows
		lines := rec.lines()
		require.Len(t, lines, 2, "lines: %v", lines)
		want := []map[string]string{
			{"level": "WARN", "msg": "addrlimit: decision with an error", "outcome": "allowed", "key": addrlimit.UnkeyedKey, "degraded": ""},
			{"level": "WARN", "msg": "addrlimit: degraded decision", "outcome": "allowed", "key": "192.0.2.1", "degraded": "true"},
		}
		for i, w := range want {
			for k, v := range w {
				assert.Equal(t, v, lines[i][k], "line %d field %s: %v", i, k, lines[i])
			}
			assert.NotEmpty(t, lines[i]["error"], "line %d: %v", i, lines[i])
		}
	})
}

// The zero LogObserver is usable: it logs to slog.Default() at most one line
// per key per minute.
func TestZeroLogObserverLogsToTheDefaultLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		old := slog.Default()
		slog.SetDefault(slog.New(rec))
		t.Cleanup(func() { slog.SetDefault(old) })
		var lo addrlimit.LogObserver
		h := mustNew(t, 1, time.Hour, addrlimit.WithObserver(lo.Observe)).Handler(okHandler)
		for range 3 {
			serve(h, req("192.0.2.1:1"))
		}
		time.Sleep(time.Minute)
		serve(h, req("192.0.2.1:1"))
		lines := rec.lines()
		require.Len(t, lines, 2, "lines: %v", lines)
		assert.Equal(t, "addrlimit: request limited", lines[0]["msg"])
		assert.Equal(t, "INFO", lines[0]["level"])
		assert.Equal(t, "1", lines[1]["suppressed"])
	})
}

// TestRouteIsTheURLPath checks what docs/observability.md says
// of Decision.Route with the recommended mounting (lim.Handler around the
// whole mux, a stacked limiter inside a route): the URL path as the client
// sent it (decoded, not cleaned), without the query, never the mux pattern;
// and none for AllowKey.
func TestRouteIsTheURLPath(t *testing.T) {
	var routes []string
	record := addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { routes = append(routes, d.Route) })
	lim := mustNew(t, 10, time.Minute, record)
	login := mustNew(t, 5, time.Minute, record, addrlimit.WithName("login"))
	mux := http.NewServeMux()
	mux.Handle("GET /agents/{id}", okHandler)
	mux.Handle("POST /login", login.Handler(okHandler))
	h := lim.Handler(mux)
	for _, target := range []string{"GET /agents/42?token=x", "GET /agents/%2e%2e/x", "POST /login"} {
		method, url, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, url, nil)
		r.RemoteAddr = "192.0.2.1:1"
		serve(h, r)
	}
	lim.AllowKey(context.Background(), "", "tenant-42", 1)
	assert.Equal(t, []string{"/agents/42", "/agents/../x", "/login", "/login", ""}, routes)
}
