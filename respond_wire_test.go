package addrlimit_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// headerCalls counts the calls of Header: once a handler has made one,
// net/http copies the header map when the status is written (a map and a
// slice per response).
type headerCalls struct {
	http.ResponseWriter
	n int
}

func (w *headerCalls) Header() http.Header { w.n++; return w.ResponseWriter.Header() }

// An allowed request that gets no quota field (HeaderNone, or the quota
// unknown because the store failed under FailOpen) leaves the header map
// alone, through Handler and Respond, and its response is on the wire byte
// for byte what the handler alone sends (the Date value aside).
func TestNoQuotaFieldLeavesTheHeaderMapAlone(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"HeaderNone", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}},
		{"FailOpen, store down", []addrlimit.Option{addrlimit.WithStore(newDownStore()), addrlimit.WithStoreFailure(addrlimit.FailOpen)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := mustNew(t, 10, time.Minute, tc.opts...)
			for mw, h := range map[string]http.Handler{"Handler": lim.Handler(ok), "Respond": allowRespond(lim, ok)} {
				calls := &headerCalls{ResponseWriter: httptest.NewRecorder()}
				h.ServeHTTP(calls, httptest.NewRequest("GET", "/", nil))
				if calls.n != 0 {
					t.Errorf("%s: %d calls of Header for an allowed request without quota fields, want 0", mw, calls.n)
				}
				if got, want := wire(t, h), wire(t, ok); got != want {
					t.Errorf("%s: on the wire\n%q\nwant what the handler alone sends\n%q", mw, got, want)
				}
			}
		})
	}
}

var dateValue = regexp.MustCompile(`(?m)^Date: .*\r$`)

// wire returns the raw response h sends to one GET over HTTP/1.1, its Date
// value blanked.
func wire(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	return dateValue.ReplaceAllString(string(b), "Date: -\r")
}
