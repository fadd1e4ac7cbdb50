package addrlimit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewInternalTokenErrors(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		wantErr string
	}{
		{"no secret", nil, "at least one secret"},
		{"empty", []string{""}, "secret 1 of 1 is empty"},
		{"short", []string{"Zq8xK2mW9pL4vB7"}, "15 bytes, shorter than the minimum of 16"},
		{"too long", []string{strings.Repeat("a", 513)}, "longer than the maximum"},
		{"space inside", []string{"abcdefgh ijklmnopq"}, "outside RFC 6750 b64token"},
		{"trailing newline", []string{"abcdefghijklmnopq\n"}, "outside RFC 6750 b64token"},
		{"padding in the middle", []string{"abcdefgh=ijklmnopq"}, "outside RFC 6750 b64token"},
		{"only padding", []string{"================"}, "outside RFC 6750 b64token"},
		{"second of two is bad", []string{secret, "bad secret with spaces"}, "secret 2 of 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := addrlimit.NewInternalToken(tc.secrets...)
			assert.Nil(t, tok, "NewInternalToken returned a token with an error")
			requirePackageError(t, err, tc.wantErr)
			for _, s := range tc.secrets {
				if len(s) >= 8 {
					assert.NotContains(t, err.Error(), s[:8], "the error echoes a secret")
				}
			}
		})
	}
}

func TestMatch(t *testing.T) {
	old, cur := "old-secret-aaaaaaaaaaaaaaaa", "new-secret-bbbbbbbbbbbbbbbb+/=="
	tok := mustToken(t, old, cur)
	tests := []struct {
		name   string
		fields []string
		want   bool
	}{
		{"current secret", []string{"Authorization", "Bearer " + cur}, true},
		{"old secret during rotation", []string{"Authorization", "Bearer " + old}, true},
		{"scheme in any case", []string{"Authorization", "bEaReR " + cur}, true},
		{"several spaces after the scheme", []string{"Authorization", "Bearer   " + cur}, true},
		{"no header", nil, false},
		{"two headers", []string{"Authorization", "Bearer " + cur, "Authorization", "Bearer " + cur}, false},
		{"two values in one line", []string{"Authorization", "Bearer " + cur + ", Bearer " + cur}, false},
		{"tab after scheme", []string{"Authorization", "Bearer\t" + cur}, false},
		{"no space", []string{"Authorization", "Bearer" + cur}, false},
		{"other scheme", []string{"Authorization", "Token " + cur}, false},
		{"Bearerx scheme", []string{"Authorization", "Bearerx " + cur}, false},
		{"case of the token matters", []string{"Authorization", "Bearer " + strings.ToUpper(cur)}, false},
		{"padding stripped", []string{"Authorization", "Bearer " + strings.TrimRight(cur, "=")}, false},
		{"concatenated secrets", []string{"Authorization", "Bearer " + old + cur}, false},
		{"too long", []string{"Authorization", "Bearer " + strings.Repeat("a", 10000)}, false},
		{"lowercase header name is canonicalised by net/http", []string{"authorization", "Bearer " + cur}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tok.Match(req("192.0.2.1:1", tc.fields...)), "Match")
		})
	}
}

func TestRequire(t *testing.T) {
	tok := mustToken(t, secret)
	h := tok.Require(okHandler)
	w := serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret))
	require.Equal(t, 200, w.Code, "valid token")
	require.Equal(t, "ok", w.Body.String(), "valid token")
	w = serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-but-well-formed-token"))
	assert.Equal(t, 401, w.Code, "wrong token: %v", w.Header())
	assert.True(t, strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer"), "wrong token: %v", w.Header())
	assert.NotContains(t, w.Body.String(), "wrong", "the 401 echoes the token")
}

func TestRequireNilPanicsAtWiringTime(t *testing.T) {
	tok := mustToken(t, secret)
	assert.Panics(t, func() { tok.Require(nil) }, "Require(nil) did not panic")
	var missing *addrlimit.InternalToken // NewInternalToken's error dropped
	assert.PanicsWithValue(t, "addrlimit: InternalToken.Require called on a nil token", func() { missing.Require(okHandler) })
}

// A nil or zero token accepts nothing, and never panics on a request.
func TestNilAndZeroTokensMatchNothing(t *testing.T) {
	r := req("192.0.2.1:1", "Authorization", "Bearer "+secret)
	for name, tok := range map[string]*addrlimit.InternalToken{"nil": nil, "zero": {}} {
		assert.False(t, tok.Match(r), name)
	}
}

// TestIncident replays the three observations of the incident write-up.
func TestIncident(t *testing.T) {
	tok := mustToken(t, secret)
	shared := "10.1.2.3:40000"

	t.Run("internal traffic with the token is never limited", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithInternalToken(tok)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared, "Authorization", "Bearer "+secret) })
		assert.Equal(t, 20, count(got, 200), "internal requests allowed of 20, codes %v", got)
	})
	t.Run("ordinary requests from one address get exactly the limit", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithInternalToken(tok)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared) })
		want := make([]int, 20)
		for i := range want {
			want[i] = map[bool]int{true: 200, false: 429}[i < 5]
		}
		assert.Equal(t, want, got)
	})
	forged := []struct {
		name   string
		fields []string
	}{
		{"same length", []string{"Authorization", "Bearer " + strings.Repeat("x", len(secret))}},
		{"other length", []string{"Authorization", "Bearer short-wrong-token"}},
		{"prefix of the secret", []string{"Authorization", "Bearer " + secret[:len(secret)-1]}},
		{"secret plus a byte", []string{"Authorization", "Bearer " + secret + "x"}},
		{"empty token", []string{"Authorization", "Bearer "}},
		{"empty header", []string{"Authorization", ""}},
		{"wrong scheme", []string{"Authorization", "Basic " + secret}},
		{"no scheme", []string{"Authorization", secret}},
		{"token in another header", []string{"X-Internal-Token", secret}},
		{"two Authorization headers", []string{"Authorization", "Bearer " + secret, "Authorization", "Bearer " + secret}},
		{"secret with trailing garbage", []string{"Authorization", "Bearer " + secret + " x"}},
	}
	for _, tc := range forged {
		t.Run("forged token is limited like anyone: "+tc.name, func(t *testing.T) {
			h := mustNew(t, 5, time.Hour, addrlimit.WithInternalToken(tok)).Handler(okHandler)
			got := codes(h, 20, func() *http.Request { return req(shared, tc.fields...) })
			assert.Equal(t, 5, count(got, 200), "allowed of 20: %v", got)
			internal := tok.Require(okHandler)
			assert.Equal(t, http.StatusUnauthorized, serve(internal, req(shared, tc.fields...)).Code, "internal route")
		})
	}
}

func FuzzMatch(f *testing.F) {
	tok := mustToken(f, secret)
	for _, s := range []string{"Bearer " + secret, "bearer " + secret, "Bearer  " + secret, "Basic " + secret, "Bearer " + secret + "=", "", "Bearer"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		want := len(v) > 7 && strings.EqualFold(v[:7], "bearer ") && strings.TrimLeft(v[7:], " ") == secret
		if got := tok.Match(r); got != want {
			t.Fatalf("Match(%q) = %v, want %v", v, got, want)
		}
	})
}

func TestRetiredSecretIsAnUnforgeableSignal(t *testing.T) {
	tok, err := mustToken(t, secret).WithRetired(retiredSecret)
	require.NoError(t, err)
	var decisions []addrlimit.Decision
	lim := mustNew(t, 2, time.Hour, addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { decisions = append(decisions, d) }))
	h := lim.Handler(okHandler)

	assert.Equal(t, 10, count(codes(h, 10, func() *http.Request { return req("10.0.0.1:1", "Authorization", "Bearer "+secret) }), 200), "accepted secret: exempt")
	got := codes(h, 4, func() *http.Request { return req("10.0.0.2:1", "Authorization", "Bearer "+retiredSecret) })
	assert.Equal(t, "[200 200 429 429]", fmt.Sprint(got), "a retired secret is not exempt")
	junk := codes(h, 4, func() *http.Request { return req("10.0.0.3:1", "Authorization", "Bearer junk-junk-junk") })
	assert.Equal(t, "[200 200 429 429]", fmt.Sprint(junk))

	s := lim.Stats()
	assert.Equal(t, uint64(2), s.RetiredTokenLimited, "only the retired secret counts")
	assert.Equal(t, uint64(4), s.CredentialedLimited, "anyone can raise the weak hint")
	retired := 0
	for _, d := range decisions {
		if d.RetiredToken {
			retired++
		}
	}
	assert.Equal(t, 4, retired, "every decision of a retired secret is flagged")
	assert.Equal(t, 401, serve(tok.Require(okHandler), req("10.0.0.2:1", "Authorization", "Bearer "+retiredSecret)).Code, "internal routes refuse a retired secret")
	assert.Equal(t, 200, serve(tok.Require(okHandler), req("10.0.0.2:1", "Authorization", "Bearer "+secret)).Code)
}

func TestWithRetiredErrors(t *testing.T) {
	tok := mustToken(t, secret)
	for _, tc := range []struct {
		name    string
		secrets []string
		want    string
	}{
		{"none", nil, "at least one secret"},
		{"too short", []string{"short"}, "retired secret 1 of 1 is 5 bytes"},
		{"accepted too", []string{retiredSecret, secret}, "retired secret 2 of 2 is also an accepted secret"},
		{"bad character", []string{retiredSecret + " "}, "outside RFC 6750"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tok.WithRetired(tc.secrets...)
			require.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), secret)
			assert.NotContains(t, err.Error(), retiredSecret)
		})
	}
}

func TestInternalTokenPrintsNoSecretMaterial(t *testing.T) {
	tok, err := mustToken(t, secret, "second-secret-0123456789abcdef").WithRetired(retiredSecret)
	require.NoError(t, err)
	const want = "InternalToken(2 secrets, 1 retired)"
	type byValue struct{ Tok addrlimit.InternalToken }
	type byPointer struct{ Tok *addrlimit.InternalToken }
	type hidden struct{ tok addrlimit.InternalToken } // fmt cannot call its methods
	type hiddenPointer struct{ tok *addrlimit.InternalToken }
	values := []struct {
		name    string
		v       any
		printed bool // fmt reaches the token's methods
	}{
		{"value", *tok, true},
		{"pointer", tok, true},
		{"struct holding a value", byValue{*tok}, true},
		{"struct holding a pointer", byPointer{tok}, true},
		{"pointer to a struct holding a value", &byValue{*tok}, true},
		{"pointer to a struct holding a pointer", &byPointer{tok}, true},
		{"slice of values", []addrlimit.InternalToken{*tok}, true},
		{"map of values", map[string]addrlimit.InternalToken{"k": *tok}, true},
		{"unexported value field", hidden{*tok}, false},
		{"unexported pointer field", hiddenPointer{tok}, false},
		{"pointer to an unexported value field", &hidden{*tok}, false},
	}
	for _, v := range values {
		var outputs []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
			outputs = append(outputs, fmt.Sprintf(verb, v.v))
		}
		for _, h := range []func(*bytes.Buffer) slog.Handler{
			func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		} {
			var logged bytes.Buffer
			slog.New(h(&logged)).Info("config", "token", v.v)
			outputs = append(outputs, logged.String())
		}
		for i, out := range outputs {
			if v.printed && i < 8 {
				assert.Contains(t, out, want, "%s, output %d", v.name, i)
			}
			if leak := secretMaterial(out, secret, "second-secret-0123456789abcdef", retiredSecret); leak != "" {
				t.Errorf("%s, output %d: %s: %s", v.name, i, leak, out)
			}
		}
	}
	var zero addrlimit.InternalToken
	assert.Equal(t, "InternalToken(0 secrets)", zero.String())
	assert.False(t, zero.Match(req("10.0.0.1:1", "Authorization", "Bearer "+secret)), "the zero token matches nothing")
}

// secretMaterial describes the first trace of secrets or of their SHA-256
// digests in out, in any form a printer uses for bytes (hex, spew's hex
// dump, decimal, Go syntax), or returns "".
func secretMaterial(out string, secrets ...string) string {
	lower := strings.ToLower(out)
	for i, s := range secrets {
		if strings.Contains(out, s) {
			return fmt.Sprintf("secret %d", i+1)
		}
		d := sha256.Sum256([]byte(s))
		for at := range len(d) - 3 { // any four bytes in a row: a diff may show part of a dump
			w := d[at : at+4]
			for _, form := range []struct{ name, text string }{
				{"hex", hex.EncodeToString(w)},
				{"hex dump", fmt.Sprintf("%02x %02x %02x %02x", w[0], w[1], w[2], w[3])},
				{"decimal", fmt.Sprint(w[0], " ", w[1], " ", w[2], " ", w[3])},
				{"Go syntax", fmt.Sprint(w[0], ", ", w[1], ", ", w[2], ", ", w[3])},
				{"Go syntax", fmt.Sprintf("0x%x, 0x%x, 0x%x", w[0], w[1], w[2])},
			} {
				if strings.Contains(lower, form.text) {
					return fmt.Sprintf("digest %d (bytes %d to %d) in %s", i+1, at, at+3, form.name)
				}
			}
		}
	}
	return ""
}

// failures is a testify TestingT that keeps what failing assertions print.
type failures struct{ out strings.Builder }

func (f *failures) Errorf(format string, args ...any) { fmt.Fprintf(&f.out, format, args...) }

// No reflection-based printer shows digest bytes, so no failing test prints
// a digest of a secret: testify's failure output (%#v of both values, and a
// diff printed by go-spew, which ignores Format and String and walks
// unexported fields) for configs that hold a token and differ elsewhere, or
// for two tokens.
func TestInternalTokenDigestsStayOutOfTestDiffs(t *testing.T) {
	tok, err := mustToken(t, secret, "second-secret-0123456789abcdef").WithRetired(retiredSecret)
	require.NoError(t, err)
	other := mustToken(t, "another-secret-0123456789abcdef")
	// The field after the token differs, so the diff's context shows the
	// end of the token's dump.
	type config struct {
		Token *addrlimit.InternalToken
		Name  string
	}
	type byValue struct {
		Token addrlimit.InternalToken
		Name  string
	}
	type hidden struct {
		token *addrlimit.InternalToken
		name  string
	}
	for _, tc := range []struct {
		name       string
		want, have any
	}{
		{"struct holding a pointer", config{tok, "a"}, config{tok, "b"}},
		{"struct holding a value", byValue{*tok, "a"}, byValue{*tok, "b"}},
		{"unexported pointer field", hidden{tok, "a"}, hidden{tok, "b"}},
		{"pointer to a struct", &config{tok, "a"}, &config{tok, "b"}},
		{"a token against none", config{tok, "a"}, config{nil, "a"}},
		{"structs holding two tokens", config{tok, "a"}, config{other, "a"}},
		{"two tokens", tok, other},
		{"two token values", *tok, *other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f failures
			require.False(t, assert.Equal(&f, tc.want, tc.have), "the values differ")
			require.False(t, assert.EqualValues(&f, tc.want, tc.have), "the values differ")
			require.False(t, assert.Exactly(&f, tc.want, tc.have), "the values differ")
			require.Contains(t, f.out.String(), "Diff:", "testify printed a diff")
			if leak := secretMaterial(f.out.String(), secret, "second-secret-0123456789abcdef", retiredSecret, "another-secret-0123456789abcdef"); leak != "" {
				t.Errorf("%s in testify's failure output:\n%s", leak, f.out.String())
			}
		})
	}
	assert.Equal(t, config{tok, "a"}, config{tok, "a"}, "one token is equal to itself")
	assert.Equal(t, byValue{*tok, "a"}, byValue{*tok, "a"}, "copies of one token are equal")
}
