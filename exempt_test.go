package addrlimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/addrlimit/addrlimit"
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
			if err == nil || tok != nil {
				t.Fatalf("NewInternalToken = %v, %v; want an error", tok, err)
			}
			if !strings.HasPrefix(err.Error(), "addrlimit: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want %q", err, tc.wantErr)
			}
			for _, s := range tc.secrets {
				if len(s) >= 8 && strings.Contains(err.Error(), s[:8]) {
					t.Fatalf("error %q echoes a secret", err)
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
			if got := tok.Match(req("192.0.2.1:1", tc.fields...)); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequire(t *testing.T) {
	tok := mustToken(t, secret)
	h := tok.Require(okHandler)
	if w := serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret)); w.Code != 200 || w.Body.String() != "ok" {
		t.Fatalf("valid token: %d %q", w.Code, w.Body.String())
	}
	w := serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-but-well-formed-token"))
	if w.Code != 401 || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("wrong token: %d %v", w.Code, w.Header())
	}
	if strings.Contains(w.Body.String(), "wrong") {
		t.Fatalf("401 echoes the token: %q", w.Body.String())
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
