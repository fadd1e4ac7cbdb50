package benchmarks

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// request is what the keep-alive client of BenchmarkServe sends, over and
// over: wrk's request.
const request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

// memConn is a keep-alive connection in memory: reads return the request
// n times, one request per Read at most (as a client that waits for each
// response sends it), then io.EOF; writes are checked to be 200 responses
// and dropped. It has no deadlines: a Read never blocks.
type memConn struct {
	left   int // requests not yet handed out
	off    int // bytes of the current request handed out
	wrote  int // responses written
	bad    int // writes that did not start a 200 response
	last   []byte
	closed chan struct{}
	once   sync.Once
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := copy(p, request[c.off:])
	if c.off += n; c.off == len(request) {
		c.off = 0
		c.left--
	}
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("HTTP/1.1 200 OK\r\n")) {
		c.wrote++
		c.last = append(c.last[:0], p...)
	} else {
		c.bad++
	}
	return len(p), nil
}

func (c *memConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// oneConn is a listener that accepts c once, then blocks until closed.
type oneConn struct {
	c    chan net.Conn
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, errors.New("closed")
	}
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// serve runs n requests of one keep-alive connection through net/http's
// server and h, and returns the connection once the server closed it.
func serve(h http.Handler, n int) *memConn {
	c := &memConn{left: n, closed: make(chan struct{})}
	l := &oneConn{c: make(chan net.Conn, 1), done: make(chan struct{})}
	l.c <- c
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	<-c.closed
	close(l.done)
	return c
}

// BenchmarkServe is the server side of the end-to-end runs without the
// kernel: net/http reads each request from memory, serves it through the
// contender and writes the response to memory, so that cpu-ns/op is the CPU
// net/http and the contender spend per request (run it with -cpu 1, as the
// end-to-end server runs on one core).
//
// The handlers of the other sub-benchmarks take what the quota fields cost
// apart: one-field sets one of the two (what the first field set on a
// response costs net/http), and typed-… serve a handler that sets its own
// Content-Type, as most handlers do, so that the fields are not the first.
func BenchmarkServe(b *testing.B) {
	names := []string{Bare, "one-field", HeadersOnly, "addrlimit", NoHeaders, "go-limiter", "tollbooth", "rate-map",
		"typed", "typed-" + HeadersOnly, "typed-addrlimit", "typed-go-limiter"}
	for _, name := range names {
		b.Run("lib="+name, func(b *testing.B) {
			h, err := serveHandler(name)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime()
			c := serve(h, b.N)
			b.StopTimer()
			reportCPU(b, start)
			if c.wrote != b.N || c.bad != 0 {
				b.Fatalf("%d responses of 200, %d others, want %d of 200", c.wrote, c.bad, b.N)
			}
		})
	}
}

// servePolicy is cmd/e2e's: it never refuses the one client.
var servePolicy = Policy{Limit: Unlimited.Limit, Per: Unlimited.Per, Burst: 1_000_000}

// typedOK is OK with a Content-Type of its own.
var typedOK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = textPlain
	w.WriteHeader(http.StatusOK)
})

var textPlain = []string{"text/plain; charset=utf-8"}

// serveHandler returns the handler of BenchmarkServe's sub-benchmark name:
// a Handler name, one-field, or typed-NAME (NAME around typedOK; typed
// alone is typedOK).
func serveHandler(name string) (http.Handler, error) {
	switch name {
	case "one-field":
		v := []string{`"default";r=1000000;t=0`}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Ratelimit"] = v
			OK.ServeHTTP(w, r)
		}), nil
	case "typed":
		return typedOK, nil
	case "typed-" + HeadersOnly:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["Ratelimit-Policy"] = []string{`"default";q=1000000;w=1`}
			h["Ratelimit"] = []string{`"default";r=1000000;t=0`}
			typedOK.ServeHTTP(w, r)
		}), nil
	case "typed-addrlimit":
		lim, err := addrlimit.New(servePolicy.Limit, servePolicy.Per, addrlimit.WithBurst(servePolicy.Burst))
		if err != nil {
			return nil, err
		}
		return lim.Handler(typedOK), nil
	case "typed-go-limiter":
		return goLimiter(servePolicy, typedOK)
	}
	return Handler(name, servePolicy)
}
