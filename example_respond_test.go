package addrlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/addrlimit/addrlimit"
)

// A framework without a slot for net/http middleware (gin) decides with
// Allow, writes Handler's response with Respond, and refunds with Refund:
// here a login that counts only failures.
func ExampleLimiter_Respond() {
	lim, err := addrlimit.New(2, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	login := func(w http.ResponseWriter, r *http.Request) {
		d := lim.Allow(r)
		if lim.Respond(w, r, d) { // the 429 of lim.Handler, fields included
			return
		}
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		lim.Refund(r.Context(), d) // successes are not counted
		fmt.Fprintln(w, "welcome")
	}
	for _, password := range []string{"right", "right", "right", "wrong", "wrong", "wrong"} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-Password", password)
		w := httptest.NewRecorder()
		login(w, r)
		fmt.Println(password, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// right 200 "default";r=1;t=0
	// right 200 "default";r=1;t=0
	// right 200 "default";r=1;t=0
	// wrong 401 "default";r=1;t=0
	// wrong 401 "default";r=0;t=1800
	// wrong 429 "default";r=0;t=1800
}
