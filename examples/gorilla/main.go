// Command gorilla shows addrlimit with gorilla/mux. Wrap the router with
// the limiter instead of calling r.Use: mux runs Use middleware only when a
// route matches, so 404 and 405 probes and path-cleaning redirects would
// never be limited.
//
//	INTERNAL_TOKEN=... go run .   # listens on 127.0.0.1:8080
package main

import (
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/gorilla/mux"
)

// limits are the budgets of the API: every request, and failed logins.
type limits struct {
	global      int
	globalPer   time.Duration
	failedLogin int
	loginPer    time.Duration
}

var production = limits{global: 300, globalPer: time.Minute, failedLogin: 5, loginPer: 15 * time.Minute}

// newHandler builds the API behind a reverse proxy on the same host
// (127.0.0.1): a per-client limit for every request, internal routes exempt
// and guarded by the same token, and a budget of failed logins.
func newHandler(token string, l limits) (http.Handler, error) {
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

	r := mux.NewRouter()
	r.HandleFunc("/sites", sites).Methods(http.MethodGet)
	r.Handle("/login", login.Handler(http.HandlerFunc(signIn))).Methods(http.MethodPost)

	// Every /internal/ path needs the token, matched or not: guard a
	// router of its own rather than Use on a subrouter (which, again, runs
	// only on matched routes).
	internal := mux.NewRouter()
	internal.HandleFunc("/internal/agents/{id}/progress", progress).Methods(http.MethodPut)
	r.PathPrefix("/internal/").Handler(tok.Require(internal))

	return global.Handler(r), nil // not r.Use(global.Handler)
}

func sites(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "[]") }

func signIn(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Password") != "right" { // your credential check
		http.Error(w, "wrong user or password", http.StatusUnauthorized)
		return
	}
	_, _ = io.WriteString(w, "welcome")
}

func progress(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "saved") }

func main() {
	h, err := newHandler(os.Getenv("INTERNAL_TOKEN"), production)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
