package addrlimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// failedOnly refunds every request that did not fail: only failures count.
func failedOnly(status int) bool { return status < 400 }

// login answers 401 unless the password is right.
var login = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	_, _ = io.WriteString(w, "welcome")
})

// TestRefundCountsFailuresRenderedAfterTheMiddleware is echo's and gin's
// case: the handler leaves the response to its framework, which writes the
// 401 after the middleware returned (echo's HTTPErrorHandler) or to a writer
// the middleware never sees (gin's c.Writer). Nothing written must not read
// as a success, or every failed login is refunded.
func TestRefundCountsFailuresRenderedAfterTheMiddleware(t *testing.T) {
	lim := mustNew(t, 3, time.Hour, addrlimit.WithRefund(failedOnly))
	failed := errors.New("wrong password")
	var err error
	limited := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { err = failed }))
	framework := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err = nil
		limited.ServeHTTP(w, r)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized) // rendered after the chain returned
		}
	})
	got := codes(framework, 5, func() *http.Request { return req("192.0.2.1:1") })
	assert.Equal(t, "[401 401 401 429 429]", fmt.Sprint(got))
	assert.Equal(t, uint64(0), lim.Stats().Refunded)
}

func TestRefundCountsOnlyFailures(t *testing.T) {
	lim := mustNew(t, 3, time.Hour, addrlimit.WithRefund(failedOnly))
	h := lim.Handler(login)
	for range 20 {
		require.Equal(t, 200, serve(h, req("192.0.2.1:1", "X-Password", "right")).Code, "successes are refunded")
	}
	got := codes(h, 5, func() *http.Request { return req("192.0.2.1:1", "X-Password", "wrong") })
	assert.Equal(t, "[401 401 401 429 429]", fmt.Sprint(got), "exactly the burst of failures")
	assert.Equal(t, 429, serve(h, req("192.0.2.1:1", "X-Password", "right")).Code, "the budget is spent: even the right password waits")
	s := lim.Stats()
	assert.Equal(t, uint64(20), s.Refunded)
	assert.Equal(t, uint64(23), s.Allowed)
}

func TestRefundUnderConcurrencyNeverExceedsTheBudget(t *testing.T) {
	// 50 concurrent wrong-password attempts, all inside the handler at once:
	// the charge happens before the handler, so at most the burst get in.
	const burst, attempts = 5, 50
	lim := mustNew(t, burst, time.Hour, addrlimit.WithRefund(failedOnly))
	var mu sync.Mutex
	inside, release := 0, make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inside++
		mu.Unlock()
		<-release
		w.WriteHeader(http.StatusUnauthorized)
	})
	h := lim.Handler(slow)
	var wg sync.WaitGroup
	results := make(chan int, attempts)
	for range attempts {
		wg.Go(func() { results <- serve(h, req("192.0.2.1:1")).Code })
	}
	// Every attempt that was not let in has been answered 429 before the
	// handler releases anyone.
	for range attempts - burst {
		require.Equal(t, 429, <-results)
	}
	close(release)
	wg.Wait()
	close(results)
	for c := range results {
		assert.Equal(t, 401, c)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, burst, inside)
}

func TestRefundNeverFillsAboveTheBurst(t *testing.T) {
	lim := mustNew(t, 2, time.Hour, addrlimit.WithRefund(func(int) bool { return true }))
	h := lim.Handler(okHandler)
	for range 10 {
		serve(h, req("192.0.2.1:1"))
	}
	d := lim.Allow(req("192.0.2.1:1"))
	assert.Equal(t, 1, d.Remaining, "refunds of a full bucket leave it full, not above")
	assert.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.1:1")).Outcome)
	assert.Equal(t, addrlimit.Limited, lim.Allow(req("192.0.2.1:1")).Outcome, "Allow never refunds")
}

func TestRefundWithCostGivesBackTheCost(t *testing.T) {
	lim := mustNew(t, 10, time.Hour, addrlimit.WithCost(costFromHeader), addrlimit.WithRefund(failedOnly))
	h := lim.Handler(login)
	require.Equal(t, 401, serve(h, req("192.0.2.1:1", "X-Cost", "4")).Code)
	require.Equal(t, 200, serve(h, req("192.0.2.1:1", "X-Cost", "4", "X-Password", "right")).Code)
	assert.Equal(t, 5, lim.Allow(req("192.0.2.1:1")).Remaining, "10 - 4 (failure) - 0 (refunded success) - 1")
}

func TestRefundStatusOfEachWayOfWriting(t *testing.T) {
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		refunded bool
	}{
		{"nothing written is not refunded", func(http.ResponseWriter, *http.Request) {}, false},
		{"103 then nothing is not refunded", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
		}, false},
		{"Write is 200", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }, true},
		{"explicit 500", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }, false},
		{"1xx then 403", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(403)
		}, false},
		{"first status wins", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(404)
			w.WriteHeader(200)
		}, false},
		{"Flush is 200", func(w http.ResponseWriter, _ *http.Request) { w.(http.Flusher).Flush() }, true},
		{"io.Copy through ReadFrom is 200", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.Copy(w, strings.NewReader("body"))
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := mustNew(t, 1, time.Hour, addrlimit.WithRefund(failedOnly))
			done := make(chan struct{}, 1)
			limited := lim.Handler(tc.handler)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				limited.ServeHTTP(w, r)
				done <- struct{}{} // the refund, if any, has happened
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			<-done
			s := lim.Stats()
			assert.Equal(t, tc.refunded, s.Refunded == 1, "refunded: %d", s.Refunded)
		})
	}
}

func TestRefundKeepsStreamingAndHijackingWorking(t *testing.T) {
	lim := mustNew(t, 5, time.Hour, addrlimit.WithRefund(failedOnly))
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		require.NoError(t, rc.SetWriteDeadline(time.Now().Add(time.Minute)), "ResponseController reaches the connection through Unwrap")
		for i := range 3 {
			fmt.Fprintf(w, "chunk %d\n", i)
			require.NoError(t, rc.Flush())
		}
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		require.NoError(t, err)
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\nhello")
		_ = rw.Flush()
	})
	// done is told when the limiter's handler, refund included, has returned.
	done := make(chan struct{}, 2)
	limited := lim.Handler(mux)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limited.ServeHTTP(w, r)
		done <- struct{}{}
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/stream")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "chunk 0\nchunk 1\nchunk 2\n", string(body))

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /hijack HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	assert.Equal(t, 101, resp.StatusCode)
	rest, _ := io.ReadAll(br)
	assert.Equal(t, "hello", string(rest))

	<-done
	<-done
	s := lim.Stats()
	assert.Equal(t, uint64(2), s.Allowed)
	assert.Equal(t, uint64(2), s.Refunded, "a stream (200) and an upgrade (101) are not failures")
}

func TestRefundSkipsAPanickingHandler(t *testing.T) {
	lim := mustNew(t, 2, time.Hour, addrlimit.WithRefund(func(int) bool { return true }))
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() { _ = recover() }()
		serve(h, req("192.0.2.1:1"))
	}()
	assert.Equal(t, uint64(0), lim.Stats().Refunded)
	assert.Equal(t, 0, lim.Allow(req("192.0.2.1:1")).Remaining, "the panicking request stays charged")
}

func TestRefundGoesToTheStore(t *testing.T) {
	st := newFailingStore()
	lim := mustNew(t, 2, time.Hour, addrlimit.WithStore(st), addrlimit.WithRefund(failedOnly))
	h := lim.Handler(login)
	for range 5 {
		require.Equal(t, 200, serve(h, req("192.0.2.1:1", "X-Password", "right")).Code)
	}
	st.down.Store(true)
	// Degraded: charged and refunded locally, and the local bucket continues
	// from the store's state (full).
	for range 5 {
		require.Equal(t, 200, serve(h, req("192.0.2.1:1", "X-Password", "right")).Code)
	}
	assert.Equal(t, "[401 401 429]", fmt.Sprint(codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })))
	st.down.Store(false)
	assert.Equal(t, "[401 401 429]", fmt.Sprint(codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })), "the store's bucket was refunded every time")
}

func TestRefundStatusEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"401 then hijack is 401", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		}, http.StatusUnauthorized},
		{"hijack before any status is 101", func(w http.ResponseWriter, _ *http.Request) {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		}, http.StatusSwitchingProtocols},
		{"WriteHeader(101) is final", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "test")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, http.StatusSwitchingProtocols},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan int, 1)
			lim := mustNew(t, 5, time.Hour, addrlimit.WithRefund(func(status int) bool { seen <- status; return false }))
			srv := httptest.NewServer(lim.Handler(tc.handler))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			// The refund function runs when the handler returns, whatever
			// the client does; the responses are small enough to sit in
			// the socket buffer unread.
			assert.Equal(t, tc.want, <-seen)
		})
	}
}
