package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

const token = "chi-example-token-0123456789abcdef"

// statuses serves n requests through h from the load balancer at 10.0.0.1
// and returns their statuses. fields are header name, value pairs.
func statuses(h http.Handler, method, path, xff string, n int, fields ...string) string {
	var codes []int
	for range n {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "10.0.0.1:443" // the load balancer
		r.Header.Set("X-Forwarded-For", xff)
		for i := 0; i+1 < len(fields); i += 2 {
			r.Header.Set(fields[i], fields[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	return fmt.Sprint(codes)
}

func TestRouter(t *testing.T) {
	h, err := newRouter(token, limits{global: 100, globalPer: time.Hour, failedLogin: 5, loginPer: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, xff string
		fields                  []string
		n                       int
		want                    string
	}{
		{"successful logins are refunded", "POST", "/login", "6.6.6.6, 203.0.113.9", []string{"X-Password", "right"}, 8, "[200 200 200 200 200 200 200 200]"},
		{"failed logins are counted per client, behind the proxy", "POST", "/login", "6.6.6.6, 203.0.113.9", nil, 6, "[401 401 401 401 401 429]"},
		{"a spoofed leftmost address does not reset the login budget", "POST", "/login", "7.7.7.7, 203.0.113.9", nil, 1, "[429]"},
		{"another client has its own budget", "POST", "/login", "203.0.113.10", nil, 1, "[401]"},
		{"internal route with the token", "PUT", "/internal/agents/42/progress", "10.0.0.5", []string{"Authorization", "Bearer " + token}, 3, "[200 200 200]"},
		{"internal route with a forged token", "PUT", "/internal/agents/42/progress", "203.0.113.11", []string{"Authorization", "Bearer forged-token-000000000000"}, 1, "[401]"},
		{"an unmatched internal path needs the token too", "GET", "/internal/unknown", "203.0.113.11", nil, 1, "[401]"},
		{"public route", "GET", "/sites", "203.0.113.12", nil, 2, "[200 200]"},
	}
	for _, tc := range tests {
		if got := statuses(h, tc.method, tc.path, tc.xff, tc.n, tc.fields...); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestUseLimitsUnmatchedRequests(t *testing.T) {
	// chi runs r.Use middleware for every request, so 404 and 405 probes
	// spend the global budget like any other request.
	h, err := newRouter(token, limits{global: 3, globalPer: time.Hour, failedLogin: 3, loginPer: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := statuses(h, "GET", "/no-such-path", "203.0.113.13", 3), "[404 404 404]"; got != want {
		t.Errorf("404 probes: %s, want %s", got, want)
	}
	if got, want := statuses(h, "DELETE", "/sites", "203.0.113.13", 1), "[429]"; got != want {
		t.Errorf("a 405 probe once the budget is spent: %s, want %s", got, want)
	}
	if got, want := statuses(h, "DELETE", "/sites", "203.0.113.14", 1), "[405]"; got != want {
		t.Errorf("another client: %s, want %s", got, want)
	}
}

// The recipe's promise, on the budget of 3 per hour: the internal token
// exempts internal calls; every internal path, routed or not, answers 401
// without it, after charging the call (so guessing is limited: the fourth
// is 429); a forged token is charged the same way; the public route is
// limited at the configured rate. A client sends the token as
// "Authorization: Bearer <secret>".
func TestRecipeExemptsGuardsAndLimits(t *testing.T) {
	h, err := newRouter(token, limits{global: 3, globalPer: time.Hour, failedLogin: 3, loginPer: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, client string, n int, fields ...string) string {
		return statuses(h, method, path, client, n, fields...)
	}
	for _, tc := range []struct {
		name, method, path, client string
		fields                     []string
		n                          int
		want                       string
	}{
		{"with the token, beyond the budget", "PUT", "/internal/agents/7/progress", "10.0.0.5", []string{"Authorization", "Bearer " + token}, 5, "[200 200 200 200 200]"},
		{"without a token", "PUT", "/internal/agents/7/progress", "203.0.113.20", nil, 4, "[401 401 401 429]"},
		{"an unknown internal path without a token", "GET", "/internal/no-such-route", "203.0.113.21", nil, 4, "[401 401 401 429]"},
		{"a forged token", "PUT", "/internal/agents/7/progress", "203.0.113.22", []string{"Authorization", "Bearer forged-token-0000000000000"}, 4, "[401 401 401 429]"},
		{"the token in another scheme", "PUT", "/internal/agents/7/progress", "203.0.113.23", []string{"Authorization", "Basic " + token}, 1, "[401]"},
		{"the public route", "GET", "/sites", "203.0.113.24", nil, 4, "[200 200 200 429]"},
	} {
		if got := do(tc.method, tc.path, tc.client, tc.n, tc.fields...); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// Other spellings of an internal path are never served without the
	// token (the router answers 401, 404 or a redirect to the guarded path).
	for _, p := range []string{"//internal/agents/7/progress", "/internal/agents/7/progress/", "/internal/../internal/agents/7/progress", "/%69nternal/agents/7/progress"} {
		if got := do("PUT", p, "203.0.113.25", 1); got == "[200]" {
			t.Errorf("PUT %s without the token: %s, want it not served", p, got)
		}
	}
}
