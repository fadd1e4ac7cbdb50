package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/labstack/echo/v4"
)

const token = "echo-example-token-0123456789abcdef"

// small budgets: 3 requests and 3 failed logins per hour, so that nothing
// refills while a test runs, however loaded the machine.
var small = limits{global: 3, globalPer: time.Hour, failedLogin: 3, loginPer: time.Hour}

// send makes n requests from client (behind the proxy on 127.0.0.1) to srv
// and returns their statuses.
func send(t *testing.T, srv *httptest.Server, method, path, client string, n int, fields ...string) string {
	t.Helper()
	var got []int
	for range n {
		r, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-Forwarded-For", client)
		for i := 0; i+1 < len(fields); i += 2 {
			r.Header.Set(fields[i], fields[i+1])
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	return fmt.Sprint(got)
}

func newServer(t *testing.T, l limits) *httptest.Server {
	t.Helper()
	e, err := newEcho(token, l)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func TestFailedLoginsAreCountedAndSuccessesRefunded(t *testing.T) {
	srv := newServer(t, limits{global: 100, globalPer: time.Hour, failedLogin: 3, loginPer: time.Hour})
	const client = "203.0.113.4"
	if got, want := send(t, srv, "POST", "/login", client, 10, "X-Password", "right"), "[200 200 200 200 200 200 200 200 200 200]"; got != want {
		t.Errorf("successful logins: %s, want %s (refunded)", got, want)
	}
	// Before WithRefund refunded only what it saw written, this was
	// [401 401 401 401 401]: echo renders the returned error after the
	// middleware, which took "nothing written" for 200.
	if got, want := send(t, srv, "POST", "/login", client, 5, "X-Password", "wrong"), "[401 401 401 429 429]"; got != want {
		t.Errorf("failed logins: %s, want %s", got, want)
	}
}

func TestLimiterAroundTheWholeEchoSeesRenderedErrors(t *testing.T) {
	// lim.Handler(e) instead of WrapMiddleware: echo's error handler then
	// writes through the limiter, so both kinds are seen.
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithRefund(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.POST("/login", signIn)
	srv := httptest.NewServer(lim.Handler(e))
	defer srv.Close()
	if got, want := send(t, srv, "POST", "/login", "", 5, "X-Password", "right"), "[200 200 200 200 200]"; got != want {
		t.Errorf("successful logins: %s, want %s (refunded)", got, want)
	}
	if got, want := send(t, srv, "POST", "/login", "", 5, "X-Password", "wrong"), "[401 401 401 429 429]"; got != want {
		t.Errorf("failed logins: %s, want %s", got, want)
	}
	if got, want := lim.Stats().Refunded, uint64(5); got != want {
		t.Errorf("refunded %d, want %d", got, want)
	}
}

func TestPreLimitsUnmatchedRequests(t *testing.T) {
	srv := newServer(t, small)
	if got, want := send(t, srv, "GET", "/no-such-path", "203.0.113.1", 4), "[404 404 404 429]"; got != want {
		t.Errorf("404 probes: %s, want %s", got, want)
	}
	if got, want := send(t, srv, "DELETE", "/sites", "203.0.113.2", 4), "[405 405 405 429]"; got != want {
		t.Errorf("405 probes: %s, want %s", got, want)
	}
	if got, want := send(t, srv, "GET", "/sites", "203.0.113.3", 4), "[200 200 200 429]"; got != want {
		t.Errorf("matched route: %s, want %s", got, want)
	}
}

func TestInternalRoutesNeedTheToken(t *testing.T) {
	srv := newServer(t, small)
	if got, want := send(t, srv, "PUT", "/internal/agents/7/progress", "10.0.0.5", 5, "Authorization", "Bearer "+token), "[200 200 200 200 200]"; got != want {
		t.Errorf("with the token, beyond the budget: %s, want %s", got, want)
	}
	if got, want := send(t, srv, "PUT", "/internal/agents/7/progress", "203.0.113.6", 4, "Authorization", "Bearer forged-token-0000000000000"), "[401 401 401 429]"; got != want {
		t.Errorf("forged token: %s, want %s (guarded and counted)", got, want)
	}
	if got, want := send(t, srv, "GET", "/internal/unknown", "203.0.113.7", 1), "[401]"; got != want {
		t.Errorf("unmatched internal path: %s, want %s", got, want)
	}
}

// The recipe's promise, on the budget of 3 per hour: the internal token
// exempts internal calls; every internal path, routed or not, answers 401
// without it, after charging the call (so guessing is limited: the fourth
// is 429); a forged token is charged the same way; the public route is
// limited at the configured rate. A client sends the token as
// "Authorization: Bearer <secret>".
func TestRecipeExemptsGuardsAndLimits(t *testing.T) {
	srv := newServer(t, small)
	do := func(method, path, client string, n int, fields ...string) string {
		return send(t, srv, method, path, client, n, fields...)
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
