package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	if err != nil {
		t.Fatal(err)
	}
	lim := mustNew(t, limit, time.Hour, append(opts, addrlimit.WithObserver(lo.Observe))...)
	return lim.Handler(okHandler), rec
}

func TestLogObserverFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1)
		serve(h, req("192.0.2.1:1"))
		if n := len(rec.lines()); n != 0 {
			t.Fatalf("allowed request logged %d lines", n)
		}
		r := req("192.0.2.1:1", "Authorization", "Bearer stale-token-0123456789abc")
		r.Method = "POST"
		r.URL.Path = "/v1/progress"
		r.URL.RawQuery = "session=secret-query"
		serve(h, r)
		lines := rec.lines()
		if len(lines) != 1 {
			t.Fatalf("%d lines, want 1", len(lines))
		}
		want := map[string]string{
			"msg": "addrlimit: request with credentials limited", "level": "WARN",
			"key": "192.0.2.1", "method": "POST", "route": "/v1/progress", "outcome": "limited",
			"mode": "enforced", "remaining": "0", "retry_after": "1h0m0s", "credentialed": "true", "suppressed": "0",
			"policy": "default", "cost": "1", "retired_token": "false",
		}
		for k, v := range want {
			if lines[0][k] != v {
				t.Errorf("%s = %q, want %q", k, lines[0][k], v)
			}
		}
		if strings.Contains(rec.text(), "secret-query") {
			t.Error("the query string was logged")
		}
	})
}

func TestLogObserverDryRunAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, rec := logLimiter(t, 1, addrlimit.WithDryRun())
		serve(h, req("192.0.2.1:1"))
		serve(h, req("192.0.2.1:1"))
		serve(h, req("not-an-address")) // key error, allowed: logged as degraded
		lines := rec.lines()
		if len(lines) != 2 {
			t.Fatalf("%d lines: %v", len(lines), lines)
		}
		if lines[0]["mode"] != "dry_run" || lines[0]["credentialed"] != "false" || lines[0]["level"] != "INFO" {
			t.Errorf("dry-run line %v", lines[0])
		}
		if lines[1]["key"] != addrlimit.UnkeyedKey || lines[1]["error"] == "" || lines[1]["outcome"] != "allowed" {
			t.Errorf("key-error line %v", lines[1])
		}
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
		assert.Equal(t, "", lines[1]["method"], "a keyed decision has no request")
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
		if n := len(rec.lines()); n != 1 {
			t.Fatalf("a flood from one key logged %d lines in one interval, want 1", n)
		}
		time.Sleep(time.Minute)
		serve(h, r)
		lines := rec.lines()
		if len(lines) != 2 || lines[1]["suppressed"] != fmt.Sprint(100_000-5-1) {
			t.Fatalf("next interval: %d lines, last %v; want suppressed=%d", len(lines), lines[len(lines)-1], 100_000-6)
		}
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
		if n := len(rec.lines()); n > 1001 {
			t.Fatalf("20,000 limited keys logged %d lines in one interval, want at most 1001", n)
		}
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
		if len(rec.lines()) != len(tokens)-1 {
			t.Fatalf("%d lines, want one per non-exempt key: %s", len(rec.lines()), text)
		}
		for _, v := range tokens {
			tokPart := v[strings.IndexByte(v, ' ')+1:]
			if strings.Contains(text, tokPart[:12]) || strings.Contains(text, secret[:12]) {
				t.Fatalf("a token reached the log: %s", text)
			}
		}
	})
}

func TestNewLogObserverErrors(t *testing.T) {
	if _, err := addrlimit.NewLogObserver(nil, time.Minute); err == nil {
		t.Error("nil logger accepted")
	}
	if _, err := addrlimit.NewLogObserver(slog.Default(), 0); err == nil {
		t.Error("zero interval accepted")
	}
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
