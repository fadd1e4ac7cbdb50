package addrlimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

const secret = "s3cr3t-internal-token-0123456789"

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// req builds a request from remote with header fields given as name, value pairs.
func req(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func mustNew(t testing.TB, limit int, per time.Duration, opts ...addrlimit.Option) *addrlimit.Limiter {
	t.Helper()
	l, err := addrlimit.New(limit, per, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustToken(t testing.TB, secrets ...string) *addrlimit.InternalToken {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// codes serves n copies of r (fresh each time) and returns the status codes.
func codes(h http.Handler, n int, mk func() *http.Request) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = serve(h, mk()).Code
	}
	return out
}

func count(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
