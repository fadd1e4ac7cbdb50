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
// sets it): one address gets the incident's 300 within a minute and its 301st
// request is refused. A contender that limits nothing (tollbooth v8 without
// SetIPLookup) would otherwise win every figure.
func TestEveryContenderRefusesThe301stRequestOverHTTP(t *testing.T) {
	for _, name := range Names() {
		if name == Bare || name == HeadersOnly {
			continue
		}
		t.Run(name, func(t *testing.T) {
			// A run that straddles a wall-clock minute is repeated once:
			// httprate's window is aligned to the minute.
			for attempt := 0; ; attempt++ {
				start := time.Now()
				allowed, first429 := send301(t, name)
				if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) && attempt == 0 {
					continue
				}
				if allowed != Incident.Burst || first429 != Incident.Burst+1 {
					t.Fatalf("%d of 301 requests allowed, first 429 at request %d; want %d allowed and the 301st refused", allowed, first429, Incident.Burst)
				}
				return
			}
		})
	}
}

// send301 serves name under Incident on a loopback server and sends it 301
// requests over one connection: it returns how many got 200 and the number
// (from 1) of the first that got 429 (0 if none).
func send301(t *testing.T, name string) (allowed, first429 int) {
	t.Helper()
	h, err := Handler(name, Incident)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := srv.Client()
	for i := 1; i <= Incident.Burst+1; i++ {
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
