// Command echo shows addrlimit with echo v4, whose echo.WrapMiddleware runs
// net/http middleware. Mount the global limiter with e.Pre, which runs
// before routing, so that every request is limited, 404 and 405 probes
// included.
//
// Counting only failed logins works on a route (echo.WrapMiddleware of a
// limiter WithRefund): echo renders an error that a handler returns after
// the middleware returned, so the limiter sees nothing written and counts
// the request, while a handler that writes its success (c.String, c.JSON)
// writes through the limiter, which refunds it.
//
//	INTERNAL_TOKEN=... go run .   # listens on 127.0.0.1:8080
package main

import (
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/labstack/echo/v4"
)

// limits are the budgets of the API: every request, and failed logins.
type limits struct {
	global      int
	globalPer   time.Duration
	failedLogin int
	loginPer    time.Duration
}

var production = limits{global: 300, globalPer: time.Minute, failedLogin: 5, loginPer: 15 * time.Minute}

// newEcho builds the API behind a reverse proxy on the same host
// (127.0.0.1): a per-client limit for every request, internal routes exempt
// and guarded by the same token, and a budget of failed logins.
func newEcho(token string, l limits) (*echo.Echo, error) {
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
	login, err := addrlimit.New(l.failedLogin, l.loginPer, addrlimit.WithName("login"), addrlimit.WithKeyFunc(proxies.Key),
		addrlimit.WithRefund(func(status int) bool { return status < 400 })) // count only failures
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	e.Pre(echo.WrapMiddleware(global.Handler)) // before routing: every request
	e.GET("/sites", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{}) })
	e.POST("/login", signIn, echo.WrapMiddleware(login.Handler))
	// Group middleware runs for every /internal/ path, matched or not.
	internal := e.Group("/internal", echo.WrapMiddleware(tok.Require))
	internal.PUT("/agents/:id/progress", func(c echo.Context) error { return c.String(http.StatusOK, "saved") })
	return e, nil
}

func signIn(c echo.Context) error {
	if c.Request().Header.Get("X-Password") != "right" { // your credential check
		return echo.ErrUnauthorized // rendered by echo after the middleware returned: counted
	}
	return c.String(http.StatusOK, "welcome") // written through the limiter: refunded
}

func main() {
	e, err := newEcho(os.Getenv("INTERNAL_TOKEN"), production)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
