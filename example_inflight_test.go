package addrlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
)

// A slow /export route allows 2 requests in flight per client beside its
// 300 per minute, server-sent events under /events/ get 1 each (a stream
// holds its slot for minutes), and every other route has the default
// 300 per minute and no in-flight limit. The third concurrent export of
// one client is refused with 429 and Retry-After: 1, and charged nothing.
func ExampleWithInFlight() {
	lim, err := addrlimit.New(300, time.Minute,
		addrlimit.WithPolicy(addrlimit.Policy{
			Name:     "export",
			Limits:   []addrlimit.Limit{{Burst: 300, Interval: time.Minute / 300}},
			InFlight: 2,
		}),
		addrlimit.WithPolicy(addrlimit.Policy{
			Name:     "stream",
			Limits:   []addrlimit.Limit{{Burst: 10, Interval: time.Minute / 10}},
			InFlight: 1,
		}),
		addrlimit.WithPolicySelector(func(r *http.Request) (policy, key string, err error) {
			switch {
			case r.URL.Path == "/export":
				return "export", "", nil
			case strings.HasPrefix(r.URL.Path, "/events/"):
				return "stream", "", nil
			}
			return "", "", nil // the default policy
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Two exports of one client are running (their handlers have not returned).
	running := make(chan struct{})
	started := make(chan struct{})
	export := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-running
	}))
	done := make(chan struct{})
	for range 2 {
		go func() {
			export.ServeHTTP(httptest.NewRecorder(), clientRequest("/export"))
			done <- struct{}{}
		}()
		<-started
	}

	w := httptest.NewRecorder()
	export.ServeHTTP(w, clientRequest("/export"))
	fmt.Println("third export:", w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	fmt.Println("slots held:", lim.Stats().Policies[1].InFlight)

	close(running)
	<-done
	<-done
	fmt.Println("slots held once they returned:", lim.Stats().Policies[1].InFlight)
	// Output:
	// third export: 429 Retry-After: 1
	// slots held: 2
	// slots held once they returned: 0
}

// clientRequest is a request of one client for path.
func clientRequest(path string) *http.Request {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "198.51.100.7:40000"
	return r
}

// Allow's callers (and Decide's, AllowKey's) release the slot themselves,
// with defer, once the decision is allowed.
func ExampleLimiter_Release() {
	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithInFlight(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		d := lim.Allow(r)
		if lim.Respond(w, r, d) {
			return // refused: it holds nothing
		}
		defer lim.Release(r.Context(), d)
		// ... the work ...
	}
	w := httptest.NewRecorder()
	serve(w, clientRequest("/report"))
	fmt.Println(w.Code, lim.Stats().Policies[0].InFlight)
	// Output: 200 0
}
