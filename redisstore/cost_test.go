package redisstore_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// A cost over the burst is refused by the Limiter's policy alone and never
// reaches Redis (it used to: 1,000 requests of cost 100,000 at burst
// 300 made 1,000 script calls, a Peek each to fill the quota fields). The
// requests a bucket can pay still make one script call each.
func TestCostOverBurstMakesNoScriptCall(t *testing.T) {
	const requests, burst, cost = 1000, 300, 100_000
	_, calls, s := countedStore(t)
	lim, err := addrlimit.New(burst, time.Minute, addrlimit.WithStore(s), addrlimit.WithCost(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
		return max(n, 1)
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serveCost := func(n int) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("X-Cost", strconv.Itoa(n))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := serveCost(1); code != 200 {
		t.Fatalf("a cost of 1: %d", code)
	}
	before := calls.n.Load() // 1, or 2 with the EVAL that loads the script
	refused := 0
	for range requests {
		if serveCost(cost) == 413 {
			refused++
		}
	}
	if n := calls.n.Load() - before; n != 0 || refused != requests {
		t.Fatalf("%d requests of cost %d at burst %d: %d refused (413), %d script calls; want %d refused and 0 calls",
			requests, cost, burst, refused, n, requests)
	}
	if code := serveCost(burst - 1); code != 200 || calls.n.Load()-before != 1 {
		t.Fatalf("a cost the bucket can pay: %d after %d script calls, want 200 after 1", code, calls.n.Load()-before)
	}
	if st := lim.Stats(); st.StoreErrors != 0 || st.Limited != requests {
		t.Fatalf("Stats: %d limited, %d store errors; want %d and 0", st.Limited, st.StoreErrors, requests)
	}
}
