// Command chi shows addrlimit with the chi router: the middleware drops in
// unchanged, because a Limiter's Handler is a plain func(http.Handler)
// http.Handler, and chi's r.Use runs it for every request, unmatched paths
// (404) and methods (405) included. Handlers write through the limiter, so
// WithRefund sees their status.
//
//	go run .   # listens on 127.0.0.1:8080; INTERNAL_TOKEN must be set
package main

import (
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/go-chi/chi/v5"
)

// limits are the budgets of the API: every request, and failed logins.
type limits struct {
	global      int
	globalPer   time.Duration
	failedLogin int
	loginPer    time.Duration
}

var production = limits{global: 300, globalPer: time.Minute, failedLogin: 5, loginPer: 15 * time.Minute}

// newRouter builds the API: a per-address limit for everything (the client
// resolved behind load balancers in 10.0.0.0/29), internal routes exempt and
// guarded by the same token, and a budget of failed logins.
func newRouter(token string, l limits) (http.Handler, error) {
	tok, err := addrlimit.NewInternalToken(token)
	if err != nil {
		return nil, err
	}
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/29")) // the balancers only
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

	r := chi.NewRouter()
	r.Use(global.Handler) // unchanged: chi middleware is func(http.Handler) http.Handler
	r.Get("/sites", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("[]")) })
	r.With(login.Handler).Post("/login", signIn)
	r.Route("/internal", func(r chi.Router) {
		r.Use(tok.Require)
		r.Put("/agents/{id}/progress", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("saved")) })
	})
	return r, nil
}

func signIn(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Password") != "right" { // your credential check
		http.Error(w, "wrong user or password", http.StatusUnauthorized)
		return
	}
	w.Write([]byte("welcome"))
}

func main() {
	h, err := newRouter(os.Getenv("INTERNAL_TOKEN"), production)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
