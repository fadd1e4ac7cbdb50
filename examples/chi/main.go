// Command chi shows addrlimit with the chi router: the middleware drops in
// unchanged, because a Limiter's Handler is a plain func(http.Handler)
// http.Handler.
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

// newRouter builds the API: a per-address limit for everything (the client
// resolved behind a load balancer in 10.0.0.0/8), internal routes exempt and
// guarded by the same token, and a stricter limit on login.
func newRouter(token string) (http.Handler, error) {
	tok, err := addrlimit.NewInternalToken(token)
	if err != nil {
		return nil, err
	}
	clientKey, err := addrlimit.TrustedProxyKey("X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/8"))
	if err != nil {
		return nil, err
	}
	global, err := addrlimit.New(300, time.Minute, addrlimit.WithKeyFunc(clientKey), addrlimit.WithInternalToken(tok))
	if err != nil {
		return nil, err
	}
	login, err := addrlimit.New(5, time.Minute, addrlimit.WithKeyFunc(clientKey))
	if err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(global.Handler) // unchanged: chi middleware is func(http.Handler) http.Handler
	r.Get("/sites", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("[]")) })
	r.With(login.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("welcome")) })
	r.Route("/internal", func(r chi.Router) {
		r.Use(tok.Require)
		r.Put("/agents/{id}/progress", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("saved")) })
	})
	return r, nil
}

func main() {
	h, err := newRouter(os.Getenv("INTERNAL_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
