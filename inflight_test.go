package addrlimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// inFlightHeld is the slots the store counts as held under the policy.
func inFlightHeld(l *addrlimit.Limiter, policy string) int {
	for _, p := range l.Stats().Policies {
		if p.Name == policy {
			return p.InFlight
		}
	}
	return -1
}

// running counts the handlers running per key and the most seen at once.
type running struct {
	mu      sync.Mutex
	now     map[string]int
	most    int
	entered atomic.Int64
}

func (c *running) enter(key string) {
	c.mu.Lock()
	if c.now == nil {
		c.now = map[string]int{}
	}
	c.now[key]++
	c.most = max(c.most, c.now[key])
	c.mu.Unlock()
	c.entered.Add(1)
}

func (c *running) leave(key string) {
	c.mu.Lock()
	c.now[key]--
	c.mu.Unlock()
}

func (c *running) max() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

// TestInFlightHandler: two slow requests of one client run, the third is
// refused with 429 and Retry-After: 1 and charged nothing; another client
// is not affected; a slot comes back when its handler returns.
func TestInFlightHandler(t *testing.T) {
	lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2))
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { serve(h, req("192.0.2.1:1")) })
		<-started
	}
	require.Equal(t, 2, inFlightHeld(lim, "default"))

	w := serve(h, req("192.0.2.1:2"))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	require.Equal(t, `"default";r=298;t=0`, w.Header().Get("RateLimit"), "the refused request is charged nothing")

	d, err := lim.Peek(t.Context(), "", "192.0.2.1")
	require.NoError(t, err)
	require.Equal(t, 298, d.Remaining, "two tokens charged, the refused request's given back")

	close(release)
	wg.Wait()
	require.Equal(t, 0, inFlightHeld(lim, "default"))
	st := lim.Stats().Policies[0]
	require.Equal(t, uint64(2), st.Allowed)
	require.Equal(t, uint64(1), st.Limited)
	require.Equal(t, uint64(1), st.InFlightLimited)

	w = serve(lim.Handler(okHandler), req("192.0.2.1:3"))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}

// TestInFlightRateDeniedHoldsNothing: a request the rate limit denies
// takes no slot.
func TestInFlightRateDeniedHoldsNothing(t *testing.T) {
	lim := mustNew(t, 1, time.Hour, addrlimit.WithInFlight(5))
	var inside int
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside = inFlightHeld(lim, "default")
	}))
	require.Equal(t, http.StatusOK, serve(h, req("192.0.2.1:1")).Code)
	require.Equal(t, 1, inside)
	w := serve(h, req("192.0.2.1:1"))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, uint64(0), lim.Stats().Policies[0].InFlightLimited)
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}

// TestInFlightExemptHoldsNothing: an exempt request takes no slot, even
// when every slot is held.
func TestInFlightExemptHoldsNothing(t *testing.T) {
	tok := mustToken(t, secret)
	lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithInternalToken(tok))
	var inside []int
	var h http.Handler
	h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside = append(inside, inFlightHeld(lim, "default"))
		if r.Header.Get("Authorization") == "" {
			require.Equal(t, http.StatusOK, serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret)).Code)
		}
	}))
	require.Equal(t, http.StatusOK, serve(h, req("192.0.2.1:1")).Code)
	require.Equal(t, []int{1, 1}, inside)
}

// TestInFlightReleasedWhateverTheHandlerDoes: a slot comes back once the
// handler returns, whether it panics, aborts or returns, and exactly once.
func TestInFlightReleasedWhateverTheHandlerDoes(t *testing.T) {
	lim := mustNew(t, 1000, time.Minute, addrlimit.WithInFlight(1))
	for _, tc := range []struct {
		name string
		do   func(w http.ResponseWriter)
	}{
		{"return", func(w http.ResponseWriter) {}},
		{"panic", func(w http.ResponseWriter) { panic("boom") }},
		{"abort", func(w http.ResponseWriter) { panic(http.ErrAbortHandler) }},
		{"write", func(w http.ResponseWriter) { _, _ = io.WriteString(w, "x") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.do(w) }))
			for range 3 {
				func() {
					defer func() { _ = recover() }()
					serve(h, req("192.0.2.1:1"))
				}()
				require.Equal(t, 0, inFlightHeld(lim, "default"))
			}
		})
	}
}

// TestInFlightPolicySelector: a streaming route under its own policy with
// a smaller in-flight limit; the default policy has none.
func TestInFlightPolicySelector(t *testing.T) {
	lim := mustNew(t, 300, time.Minute,
		addrlimit.WithPolicy(addrlimit.Policy{Name: "stream", Limits: []addrlimit.Limit{{Burst: 60, Interval: time.Second}}, InFlight: 1}),
		addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
			if strings.HasPrefix(r.URL.Path, "/events") {
				return "stream", "", nil
			}
			return "", "", nil
		}))
	var codes []int
	var h http.Handler
	h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			return
		}
		for _, path := range []string{"/events", "/", "/"} {
			r2 := httptest.NewRequest("GET", path, nil)
			r2.RemoteAddr = r.RemoteAddr
			codes = append(codes, serve(h, r2).Code)
		}
	}))
	r := httptest.NewRequest("GET", "/events", nil)
	r.RemoteAddr = "192.0.2.1:1"
	require.Equal(t, http.StatusOK, serve(h, r).Code)
	require.Equal(t, []int{429, 200, 200}, codes)
	require.Equal(t, 0, inFlightHeld(lim, "stream"))
	require.Equal(t, 0, lim.Stats().Policies[0].InFlight)
}

func TestWithInFlightValidates(t *testing.T) {
	_, err := addrlimit.New(1, time.Second, addrlimit.WithInFlight(-1))
	requirePackageError(t, err, "in-flight limit must be 0 (none) to 1048576, got -1")
	err = addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}, InFlight: -2}.Validate()
	requirePackageError(t, err, `policy "p": in-flight limit must be 0 (none) to 1048576, got -2`)
	lim := mustNew(t, 1, time.Second, addrlimit.WithInFlight(3))
	require.Equal(t, 3, lim.Policies()[0].InFlight)
}

// TestInFlightMaxKeys: past WithMaxKeys keys holding slots, a new key is
// refused; keys holding slots are never evicted, and a key with none
// running holds no entry.
func TestInFlightMaxKeys(t *testing.T) {
	lim := mustNew(t, 1000, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithMaxKeys(1))
	var held []addrlimit.Decision
	refused := 0
	for i := range 200 {
		d := lim.AllowKey(t.Context(), "", fmt.Sprintf("user:%d", i), 1)
		if d.Denied() {
			require.True(t, d.InFlightLimited)
			refused++
			continue
		}
		held = append(held, d)
	}
	st := lim.Stats().Policies[0]
	require.Equal(t, 1, st.InFlightKeys, "the bound")
	require.Len(t, held, 1)
	require.Equal(t, 199, refused)
	for _, d := range held {
		require.True(t, lim.AllowKey(t.Context(), "", d.Key, 1).Denied(), "a key holding its slot keeps it")
		lim.Release(t.Context(), d)
	}
	require.Equal(t, 0, inFlightHeld(lim, "default"))
	require.Equal(t, 0, lim.Stats().Policies[0].InFlightKeys)
}

// TestInFlightAllowRelease: Allow's decision holds its slot until Release,
// which frees it once however often it is called.
func TestInFlightAllowRelease(t *testing.T) {
	lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2))
	a := lim.Allow(req("192.0.2.1:1"))
	b := lim.Allow(req("192.0.2.1:1"))
	require.True(t, a.HoldsSlot())
	require.Equal(t, 2, b.InFlight)
	c := lim.Allow(req("192.0.2.1:1"))
	require.True(t, c.Denied())
	require.True(t, c.InFlightLimited)
	require.False(t, c.HoldsSlot())
	require.Equal(t, time.Second, c.RetryAfter)
	lim.Release(t.Context(), c) // holds nothing: frees nothing
	require.Equal(t, 2, inFlightHeld(lim, "default"))
	lim.Release(t.Context(), a)
	lim.Release(t.Context(), a) // a second time: nothing
	copyOfA := a
	lim.Release(t.Context(), copyOfA)
	require.Equal(t, 1, inFlightHeld(lim, "default"))
	other := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(2))
	other.Release(t.Context(), b) // another Limiter's decision
	require.Equal(t, 1, inFlightHeld(lim, "default"))
	lim.Release(t.Context(), b)
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}

// TestInFlightAllowReleaseConcurrent: 64 goroutines calling Allow and
// Release on one key never have more than N decisions holding slots.
func TestInFlightAllowReleaseConcurrent(t *testing.T) {
	const n = 3
	lim := mustNew(t, 1<<30, time.Hour, addrlimit.WithInFlight(n))
	var c running
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 500 {
				d := lim.Allow(req("192.0.2.1:1"))
				if d.Denied() {
					require.True(t, d.InFlightLimited)
					continue
				}
				c.enter("k")
				c.leave("k")
				lim.Release(t.Context(), d)
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, c.max(), n)
	require.Positive(t, c.entered.Load())
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}

// slowHandler counts the handlers running per client address, and keeps
// each running for a while whatever the client does (the slot is held
// until the handler returns, not until the client goes away). Until the
// limit has refused a request (refusedOnce's gate), every handler waits:
// the first N hold their slots, so the next request is refused whatever
// the scheduling.
func slowHandler(c *running, gate <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		c.enter(host)
		if r.URL.Path != "/warm" {
			<-gate
		}
		for range 20 {
			time.Sleep(50 * time.Microsecond) // the work; not a timing assumption
		}
		c.leave(host)
		_, _ = io.WriteString(w, "ok")
	})
}

// refusedOnce returns a gate closed by the first in-flight refusal, and
// the observer that closes it.
func refusedOnce() (<-chan struct{}, addrlimit.Option) {
	gate := make(chan struct{})
	var once sync.Once
	return gate, addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		if d.InFlightLimited {
			once.Do(func() { close(gate) })
		}
	})
}

// TestInFlightHTTP2RapidReset: 250 concurrent HTTP/2 streams from one
// client on one connection (4 rounds), half of them reset as soon as they
// are sent: never more than N handlers of the client run at once (217 of
// them did without the limit), and no slot is left held.
func TestInFlightHTTP2RapidReset(t *testing.T) {
	const n = 2
	gate, observer := refusedOnce()
	lim := mustNew(t, 1<<30, time.Hour, addrlimit.WithInFlight(n), observer)
	var c running
	srv := httptest.NewUnstartedServer(lim.Handler(slowHandler(&c, gate)))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	client := srv.Client()
	tr := client.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = true
	tr.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true} // one connection, 250 streams at most
	warm, err := client.Get(srv.URL + "/warm")                      // the connection, before the streams share it
	require.NoError(t, err)
	_ = warm.Body.Close()
	var ok, refused, reset atomic.Int64
	var wg sync.WaitGroup
	for round := range 4 {
		for i := range 250 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				if (i+round)%2 == 0 {
					go cancel() // RST_STREAM as soon as the stream opens
				}
				res, err := client.Do(r)
				if err != nil {
					reset.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				require.Equal(t, 2, res.ProtoMajor)
				switch res.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("status %d", res.StatusCode)
				}
			})
		}
		wg.Wait()
	}
	srv.Close()
	t.Logf("ok %d, refused %d, reset %d, handlers run %d, most at once %d, connections %d", ok.Load(), refused.Load(), reset.Load(), c.entered.Load(), c.max(), conns.Load())
	require.Equal(t, int64(1), conns.Load(), "every stream on one connection")
	require.LessOrEqual(t, c.max(), n)
	require.Positive(t, refused.Load())
	// Close waits for the connection, not for the handlers of its HTTP/2
	// streams: one whose stream was reset may still be returning, and
	// releases its slot when it does. No slot may stay held (the bound is
	// for a loaded machine, not a timing claim).
	require.Eventually(t, func() bool { return inFlightHeld(lim, "default") == 0 }, 30*time.Second, time.Millisecond, "a slot stayed held after every handler returned")
}

// TestInFlightHTTP1Pipelining: 8 connections of one client, each sending
// 32 requests in one write: never more than N handlers at once.
func TestInFlightHTTP1Pipelining(t *testing.T) {
	const n = 2
	gate, observer := refusedOnce()
	lim := mustNew(t, 1<<30, time.Hour, addrlimit.WithInFlight(n), observer)
	var c running
	srv := httptest.NewServer(lim.Handler(slowHandler(&c, gate)))
	var statuses sync.Map
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			_, err = io.WriteString(conn, strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 32))
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			for range 32 {
				res, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				v, _ := statuses.LoadOrStore(res.StatusCode, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		})
	}
	wg.Wait()
	srv.Close()
	require.LessOrEqual(t, c.max(), n)
	require.Positive(t, refusedCount(&statuses))
	require.Equal(t, int64(256), c.entered.Load()+refusedCount(&statuses))
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}

func refusedCount(m *sync.Map) int64 {
	v, ok := m.Load(http.StatusTooManyRequests)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// hijackWriter is a ResponseWriter whose connection can be hijacked.
type hijackWriter struct {
	*httptest.ResponseRecorder
}

func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	a, b := net.Pipe()
	_ = b.Close()
	return a, bufio.NewReadWriter(bufio.NewReader(a), bufio.NewWriter(a)), nil
}

// TestInFlightNoLeak: 10^5 requests of 16 clients that return, panic,
// abort, time out (http.TimeoutHandler), are cancelled by their client or
// hijack their connection leave no slot held, by the store's own count.
func TestInFlightNoLeak(t *testing.T) {
	lim := mustNew(t, 1<<30, time.Hour, addrlimit.WithInFlight(2))
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/hijack":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		case "/cancel":
			<-r.Context().Done()
		case "/timeout":
			<-r.Context().Done() // TimeoutHandler cancels it
		}
	})
	timeout := http.TimeoutHandler(inner, time.Nanosecond, "")
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/timeout" {
			timeout.ServeHTTP(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	paths := []string{"/", "/panic", "/abort", "/hijack", "/cancel", "/timeout"}
	const total = 100_000
	var next atomic.Int64
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				path := paths[i%int64(len(paths))]
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", g%4)
				if path == "/cancel" {
					ctx, cancel := context.WithCancel(r.Context())
					cancel()
					r = r.WithContext(ctx)
				}
				w := hijackWriter{httptest.NewRecorder()}
				func() {
					defer func() {
						if v := recover(); v != nil && v != "boom" && v != http.ErrAbortHandler {
							t.Errorf("panic %v", v)
						}
					}()
					h.ServeHTTP(w, r)
				}()
				if w.Code == http.StatusTooManyRequests {
					refused.Add(1)
				} else {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("served %d, refused %d", served.Load(), refused.Load())
	require.Equal(t, int64(total), served.Load()+refused.Load())
	st := lim.Stats().Policies[0]
	require.Equal(t, 0, st.InFlight)
	require.Equal(t, 0, st.InFlightKeys)
	require.Equal(t, uint64(total), st.Allowed+st.Limited)
}

// TestLogObserverNamesTheInFlightLimit: an in-flight refusal is logged with
// limit "in-flight" and the key's slots held.
func TestLogObserverNamesTheInFlightLimit(t *testing.T) {
	rec := &recorder{}
	lo, err := addrlimit.NewLogObserver(slog.New(rec), time.Minute)
	require.NoError(t, err)
	lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithObserver(lo.Observe))
	held := lim.AllowKey(t.Context(), "", "user:7", 1)
	defer lim.Release(t.Context(), held)
	require.Empty(t, rec.lines())
	d := lim.AllowKey(t.Context(), "", "user:7", 1)
	require.True(t, d.InFlightLimited)
	lines := rec.lines()
	require.Len(t, lines, 1)
	for k, v := range map[string]string{"limit": "in-flight", "in_flight": "1", "key": "user:7", "retry_after": "1s", "remaining": "299", "outcome": "limited"} {
		require.Equal(t, v, lines[0][k], "field %s", k)
	}
}

// TestInFlightDryRun: in a dry run, a request the in-flight limit would
// refuse is served, holding no slot, flagged and counted as limited.
func TestInFlightDryRun(t *testing.T) {
	lim := mustNew(t, 300, time.Minute, addrlimit.WithInFlight(1), addrlimit.WithDryRun())
	a := lim.Allow(req("192.0.2.1:1"))
	require.True(t, a.HoldsSlot())
	b := lim.Allow(req("192.0.2.1:1"))
	require.True(t, b.InFlightLimited)
	require.True(t, b.DryRun)
	require.False(t, b.Denied())
	require.False(t, b.HoldsSlot())
	require.Equal(t, 1, inFlightHeld(lim, "default"))
	st := lim.Stats().Policies[0]
	require.Equal(t, uint64(1), st.Limited)
	require.Equal(t, uint64(1), st.InFlightLimited)
	lim.Release(t.Context(), a)
	require.Equal(t, 0, inFlightHeld(lim, "default"))
}
