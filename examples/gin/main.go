// Command gin shows addrlimit with gin, which has no slot for net/http
// middleware and whose handlers write to gin's own ResponseWriter. The
// limiter runs as gin middleware built from Limiter.Allow (the decision),
// Limiter.Respond (the quota fields, and the very 429 that Handler sends)
// and Limiter.Refund (for a login budget that counts only failures).
//
//	INTERNAL_TOKEN=... go run .   # listens on 127.0.0.1:8080
package main

import (
	"log"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/gin-gonic/gin"
)

// limit is gin middleware that decides each request as lim.Handler would.
// With refund set, a request whose response was written with a status that
// refund accepts gets its tokens back; a response gin has not written yet
// when the handlers return (c.Status without a body) is counted.
func limit(lim *addrlimit.Limiter, refund func(status int) bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		d := lim.Allow(c.Request)
		if lim.Respond(c.Writer, c.Request, d) { // wrote the 429
			c.Abort()
			return
		}
		c.Next()
		if refund != nil && c.Writer.Written() && refund(c.Writer.Status()) {
			lim.Refund(c.Request.Context(), d)
		}
	}
}

// requireUnder answers every request whose path is prefix or under it
// (prefix+"/…"), routed or not, with InternalToken.Require's 401 unless it
// carries the token. A group's middleware would not do: gin runs it only
// on the group's matched routes, so an unknown internal path would get 404
// without the token. Mount it after the limiter, so that a forged token is
// charged before it is refused.
func requireUnder(prefix string, tok *addrlimit.InternalToken) gin.HandlerFunc {
	unauthorized := tok.Require(http.NotFoundHandler()) // its 401, for a request without the token
	return func(c *gin.Context) {
		if p := c.Request.URL.Path; (p == prefix || strings.HasPrefix(p, prefix+"/")) && !tok.Match(c.Request) {
			unauthorized.ServeHTTP(c.Writer, c.Request)
			c.Abort()
		}
	}
}

// limits are the budgets of the API: every request, and failed logins.
type limits struct {
	global      int
	globalPer   time.Duration
	failedLogin int
	loginPer    time.Duration
}

var production = limits{global: 300, globalPer: time.Minute, failedLogin: 5, loginPer: 15 * time.Minute}

// newEngine builds the API behind a reverse proxy on the same host
// (127.0.0.1): a per-client limit for every request, internal routes exempt
// and guarded by the same token, and a budget of failed logins.
func newEngine(token string, l limits) (*gin.Engine, error) {
	tok, err := addrlimit.NewInternalToken(token)
	if err != nil {
		return nil, err
	}
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		return nil, err
	}
	global, err := addrlimit.New(l.global, l.globalPer, addrlimit.WithKeyFunc(proxies.Key), addrlimit.WithInternalToken(tok))
	if err != nil {
		return nil, err
	}
	login, err := addrlimit.New(l.failedLogin, l.loginPer, addrlimit.WithName("login"), addrlimit.WithKeyFunc(proxies.Key))
	if err != nil {
		return nil, err
	}

	e := gin.New()
	// gin answers a path that differs from a route by a trailing slash with
	// a redirect before any middleware runs: unlimited and unguarded. Off,
	// such a path is unmatched like any other.
	e.RedirectTrailingSlash = false
	// Engine middleware runs for unmatched paths (404) too: the limiter,
	// then the guard of every /internal path.
	e.Use(limit(global, nil), requireUnder("/internal", tok))
	e.GET("/sites", func(c *gin.Context) { c.JSON(http.StatusOK, []string{}) })
	e.POST("/login", limit(login, func(status int) bool { return status < 400 }), signIn)
	internal := e.Group("/internal")
	internal.PUT("/agents/:id/progress", func(c *gin.Context) { c.String(http.StatusOK, "saved") })
	return e, nil
}

func signIn(c *gin.Context) {
	if c.GetHeader("X-Password") != "right" { // your credential check
		c.AbortWithStatus(http.StatusUnauthorized)
		return
	}
	c.String(http.StatusOK, "welcome")
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	e, err := newEngine(os.Getenv("INTERNAL_TOKEN"), production)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
