package redisstore_test

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
)

// hangUp sends one request to addr and hangs up before the answer, as a
// client that gives up does: over HTTP/2 (prior knowledge, h2c) a HEADERS
// frame for a new stream then RST_STREAM(CANCEL) for it, on a connection it
// keeps open; over HTTP/1 the request, then it closes the connection. It
// returns once the server's handler chain has finished.
type hangUp func(t *testing.T, addr string, finished <-chan struct{})

func h1HangUp(t *testing.T, addr string, finished <-chan struct{}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: api.example\r\n\r\n"))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitFinished(t, finished)
}

func waitFinished(t *testing.T, finished <-chan struct{}) {
	t.Helper()
	select {
	case <-finished:
	case <-time.After(10 * time.Second): // a hang detector
		t.Fatal("the handler chain did not finish")
	}
}

// h2Frame writes one HTTP/2 frame (RFC 9113 §4.1).
func h2Frame(w *bufio.Writer, typ, flags byte, stream uint32, payload []byte) {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	w.Write(h[:])
	w.Write(payload)
}

func h2HangUp(t *testing.T, addr string, finished <-chan struct{}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := bufio.NewWriter(c)
	w.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	h2Frame(w, 0x4, 0, 0, nil) // SETTINGS
	// HPACK (RFC 7541): :method GET, :scheme http, :path / from the static
	// table, :authority as a literal with an indexed name.
	const authority = "api.example"
	block := append([]byte{0x82, 0x86, 0x84, 0x41, byte(len(authority))}, authority...)
	h2Frame(w, 0x1, 0x1|0x4, 1, block)                             // HEADERS, END_STREAM | END_HEADERS
	h2Frame(w, 0x3, 0, 1, binary.BigEndian.AppendUint32(nil, 0x8)) // RST_STREAM, CANCEL
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Keep the connection open until the server is done: closing it would
	// be the HTTP/1 case.
	waitFinished(t, finished)
}

// A client that hangs up gets no free pass: net/http cancels the request's
// context and still runs the handler, and the decision is taken all the
// same, by Redis. A KeyFunc that waits for the hang-up makes sure the
// context is cancelled before the Limiter asks the store. In every failure
// mode (FailLocal with three instances sharing one Redis), 30 attempts
// against a budget of 3 per hour run the handler 3 times, and no store
// error is counted.
func TestHangUpGetsNoFreePass(t *testing.T) {
	needRedis(t)
	const budget, attempts = 3, 30
	for _, client := range []struct {
		name string
		send hangUp
	}{{"HTTP/2 RST_STREAM", h2HangUp}, {"HTTP/1 close", h1HangUp}} {
		for _, mode := range []struct {
			name      string
			policy    addrlimit.FailurePolicy
			instances int
		}{{"FailOpen", addrlimit.FailOpen, 1}, {"FailClosed", addrlimit.FailClosed, 1}, {"FailLocal", addrlimit.FailLocal, 3}} {
			t.Run(client.name+"/"+mode.name, func(t *testing.T) {
				prefix := testPrefix(t)
				var ran atomic.Int64
				finished := make(chan struct{}, 1)
				var addrs []string
				var lims []*addrlimit.Limiter
				for range mode.instances {
					s := newStore(t, shared.client(t), redisstore.WithKeyPrefix(prefix))
					lim, err := addrlimit.New(budget, time.Hour, addrlimit.WithStore(s), addrlimit.WithStoreFailure(mode.policy),
						addrlimit.WithKeyFunc(func(r *http.Request) (string, error) {
							select { // until the client hung up
							case <-r.Context().Done():
							case <-time.After(10 * time.Second):
								t.Error("the request's context was not cancelled by the hang-up")
							}
							return "client", nil
						}))
					if err != nil {
						t.Fatal(err)
					}
					h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) }))
					srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						h.ServeHTTP(w, r)
						finished <- struct{}{}
					}))
					srv.Config.Protocols = new(http.Protocols)
					srv.Config.Protocols.SetHTTP1(true)
					srv.Config.Protocols.SetUnencryptedHTTP2(true)
					srv.Start()
					t.Cleanup(srv.Close)
					addrs = append(addrs, srv.Listener.Addr().String())
					lims = append(lims, lim)
				}
				for i := range attempts {
					client.send(t, addrs[i%len(addrs)], finished)
				}
				var storeErrors uint64
				for _, lim := range lims {
					storeErrors += lim.Stats().StoreErrors
				}
				t.Logf("handler ran %d times for %d attempts against a budget of %d; %d store errors", ran.Load(), attempts, budget, storeErrors)
				if ran.Load() > budget || storeErrors != 0 {
					t.Fatalf("handler ran %d times for %d attempts that hung up, budget %d; StoreErrors %d, want 0",
						ran.Load(), attempts, budget, storeErrors)
				}
			})
		}
	}
}
