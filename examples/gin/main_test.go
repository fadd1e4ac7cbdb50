package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/gin-gonic/gin"
)

const token = "gin-example-token-0123456789abcdef"

// small budgets: 3 requests and 3 failed logins per hour, so that nothing
// refills while a test runs, however loaded the machine.
var small = limits{global: 3, globalPer: time.Hour, failedLogin: 3, loginPer: time.Hour}

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// send makes n requests from client (behind the proxy on 127.0.0.1) to srv
// and returns their statuses, and the last response.
func send(t *testing.T, srv *httptest.Server, method, path, client string, n int, fields ...string) (string, *http.Response, string) {
	t.Helper()
	var got []int
	var last *http.Response
	var body []byte
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
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		got, last = append(got, resp.StatusCode), resp
	}
	return fmt.Sprint(got), last, string(body)
}

func statuses(t *testing.T, srv *httptest.Server, method, path, client string, n int, fields ...string) string {
	t.Helper()
	s, _, _ := send(t, srv, method, path, client, n, fields...)
	return s
}

// guard runs net/http middleware that either answers a request itself or
// passes it on unchanged as gin middleware: a net/http limiter adapted
// this way sees nothing that gin handlers write.
func guard(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true })).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
			return
		}
		c.Next()
	}
}

func newServer(t *testing.T, l limits) *httptest.Server {
	t.Helper()
	e, err := newEngine(token, l)
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
	if got, want := statuses(t, srv, "POST", "/login", client, 10, "X-Password", "right"), "[200 200 200 200 200 200 200 200 200 200]"; got != want {
		t.Errorf("successful logins: %s, want %s (refunded)", got, want)
	}
	if got, want := statuses(t, srv, "POST", "/login", client, 5, "X-Password", "wrong"), "[401 401 401 429 429]"; got != want {
		t.Errorf("failed logins: %s, want %s", got, want)
	}
}

func TestStatusWithoutBodyIsCounted(t *testing.T) {
	// c.Status sets a status that gin writes only after the handlers
	// returned: the middleware cannot know it was a success, so it counts.
	lim, err := addrlimit.New(2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.POST("/login", limit(lim, func(status int) bool { return status < 400 }), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	srv := httptest.NewServer(e)
	defer srv.Close()
	if got, want := statuses(t, srv, "POST", "/login", "", 3), "[204 204 429]"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

func TestNetHTTPLimiterAdaptedIntoGinNeverRefunds(t *testing.T) {
	// The trap: a net/http limiter WithRefund adapted into gin sees
	// nothing written (gin handlers write to c.Writer, after the adapter
	// returned). It used to take that for 200 and refund every failed
	// login: [401 401 401 401 401]. Now nothing written is counted, so
	// the budget holds; use limit(lim, refund) to refund successes.
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithRefund(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.POST("/login", guard(lim.Handler), signIn)
	srv := httptest.NewServer(e)
	defer srv.Close()
	if got, want := statuses(t, srv, "POST", "/login", "", 5, "X-Password", "wrong"), "[401 401 401 429 429]"; got != want {
		t.Errorf("failed logins: %s, want %s", got, want)
	}
}

func TestLimiterAroundTheWholeEngineSeesWhatGinWrites(t *testing.T) {
	lim, err := addrlimit.New(3, time.Hour, addrlimit.WithRefund(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.POST("/login", signIn)
	srv := httptest.NewServer(lim.Handler(e))
	defer srv.Close()
	if got, want := statuses(t, srv, "POST", "/login", "", 5, "X-Password", "right"), "[200 200 200 200 200]"; got != want {
		t.Errorf("successful logins: %s, want %s (refunded)", got, want)
	}
	if got, want := statuses(t, srv, "POST", "/login", "", 5, "X-Password", "wrong"), "[401 401 401 429 429]"; got != want {
		t.Errorf("failed logins: %s, want %s", got, want)
	}
}

func TestGinMiddlewareAnswersLikeHandler(t *testing.T) {
	// The same limiter configuration as net/http middleware and as gin
	// middleware: same statuses, same fields, same body.
	newLim := func() *addrlimit.Limiter {
		lim, err := addrlimit.New(2, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	e := gin.New()
	e.Use(limit(newLim(), nil))
	e.GET("/sites", func(c *gin.Context) { c.String(http.StatusOK, "[]") })
	viaGin := httptest.NewServer(e)
	defer viaGin.Close()
	viaHandler := httptest.NewServer(newLim().Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "[]")
	})))
	defer viaHandler.Close()
	for i := range 3 {
		wantCodes, want, wantBody := send(t, viaHandler, "GET", "/sites", "", 1)
		gotCodes, got, gotBody := send(t, viaGin, "GET", "/sites", "", 1)
		if gotCodes != wantCodes || gotBody != wantBody {
			t.Errorf("request %d: %s %q, want %s %q", i+1, gotCodes, gotBody, wantCodes, wantBody)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After", "Cache-Control", "Content-Type", "X-Content-Type-Options"} {
			if g, w := got.Header.Values(f), want.Header.Values(f); fmt.Sprint(g) != fmt.Sprint(w) {
				t.Errorf("request %d: %s: %q, want %q", i+1, f, g, w)
			}
		}
	}
}

func TestEngineMiddlewareLimitsUnmatchedRequests(t *testing.T) {
	e, err := newEngine(token, small)
	if err != nil {
		t.Fatal(err)
	}
	e.HandleMethodNotAllowed = true // without it, gin answers a wrong method 404
	srv := httptest.NewServer(e)
	defer srv.Close()
	if got, want := statuses(t, srv, "GET", "/no-such-path", "203.0.113.1", 4), "[404 404 404 429]"; got != want {
		t.Errorf("404 probes: %s, want %s", got, want)
	}
	if got, want := statuses(t, srv, "DELETE", "/sites", "203.0.113.2", 4), "[405 405 405 429]"; got != want {
		t.Errorf("405 probes: %s, want %s", got, want)
	}
	if got, want := statuses(t, srv, "GET", "/sites", "203.0.113.3", 4), "[200 200 200 429]"; got != want {
		t.Errorf("matched route: %s, want %s", got, want)
	}
}

func TestInternalRoutesNeedTheToken(t *testing.T) {
	srv := newServer(t, small)
	if got, want := statuses(t, srv, "PUT", "/internal/agents/7/progress", "10.0.0.5", 5, "Authorization", "Bearer "+token), "[200 200 200 200 200]"; got != want {
		t.Errorf("with the token, beyond the budget: %s, want %s", got, want)
	}
	if got, want := statuses(t, srv, "PUT", "/internal/agents/7/progress", "203.0.113.6", 4, "Authorization", "Bearer forged-token-0000000000000"), "[401 401 401 429]"; got != want {
		t.Errorf("forged token: %s, want %s (guarded and counted)", got, want)
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
		return statuses(t, srv, method, path, client, n, fields...)
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

// gin answers a path that differs from a route by a trailing slash with a
// redirect before any middleware runs: with RedirectTrailingSlash on, those
// answers were never limited or guarded (PUT …/progress/ was [307 307 307
// 307]). Redirects are not followed here: they are the server's answer.
func TestTrailingSlashVariantsAreLimitedAndGuarded(t *testing.T) {
	srv := newServer(t, small)
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, tc := range []struct{ method, path, client, want string }{
		{"PUT", "/internal/agents/7/progress/", "203.0.113.30", "[401 401 401 429]"},
		{"GET", "/sites/", "203.0.113.31", "[404 404 404 429]"},
	} {
		var got []int
		for range 4 {
			r, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("X-Forwarded-For", tc.client)
			resp, err := client.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%s %s without the token: %v, want %s", tc.method, tc.path, got, tc.want)
		}
	}
}
