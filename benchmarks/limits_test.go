package benchmarks

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Every contender the benchmarks and the end-to-end runs serve must limit when
// built as they build it and reached over real HTTP (RemoteAddr as net/http
// sets it): one address gets a burst of 300 and its 301st request is refused.
// A contender that limits nothing (tollbooth v8 without SetIPLookup) would
// otherwise win every figure.
func TestEveryContenderRefusesThe301stRequestOverHTTP(t *testing.T) {
	// 300 per hour: a token comes back every 12 s, so a run of 301 requests
	// that takes less (on loopback, by far) sees none come back.
	p := Policy{Limit: 300, Per: time.Hour, Burst: 300}
	refill := p.Per / time.Duration(p.Limit)
	for _, name := range Names() {
		if name == Bare || name == HeadersOnly {
			continue
		}
		t.Run(name, func(t *testing.T) {
			// A run that straddles a wall-clock hour (httprate's window is
			// aligned to it) or outlasts a refill says nothing: repeat it.
			for attempt := 1; ; attempt++ {
				start := time.Now()
				allowed, first429 := send301(t, name, p)
				if (start.Truncate(p.Per) != time.Now().Truncate(p.Per) || time.Since(start) >= refill) && attempt < 3 {
					continue
				}
				if allowed != p.Burst || first429 != p.Burst+1 {
					t.Fatalf("%d of 301 requests allowed, first 429 at request %d (in %v); want %d allowed and the 301st refused", allowed, first429, time.Since(start), p.Burst)
				}
				return
			}
		})
	}
}

// send301 serves name under p on a loopback server and sends it 301
// requests over one connection: it returns how many got 200 and the number
// (from 1) of the first that got 429 (0 if none).
func send301(t *testing.T, name string, p Policy) (allowed, first429 int) {
	t.Helper()
	h, err := Handler(name, p)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := srv.Client()
	for i := 1; i <= 301; i++ {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
			if first429 == 0 {
				first429 = i
			}
		default:
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	return allowed, first429
}
