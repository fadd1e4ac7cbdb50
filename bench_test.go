package addrlimit_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// discard is a reusable ResponseWriter whose header map is cleared per call.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

var noop = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

// benchServe serves r through h b.N times.
func benchServe(b *testing.B, h http.Handler, r *http.Request) {
	benchStatus(b, h, r, http.StatusOK)
}

// benchStatus serves r through h b.N times and checks that the last response
// had the status the benchmark is about.
func benchStatus(b *testing.B, h http.Handler, r *http.Request, status int) {
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.code != status {
		b.Fatalf("status %d, want %d", w.code, status)
	}
}

// limits are the limits of the cliff target: header values for any limit
// and burst cost the same.
var limits = []int{300, 5000, 1_000_000, 1_000_000_000}

// BenchmarkAllowed: one address, a budget that never runs out. The limit=N
// cases have burst = limit and a token every 10 ns, so every response
// reports a full bucket (remaining = limit-1), the state of a client below
// its limit.
func BenchmarkAllowed(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"headers=draft", nil},
		{"headers=x-ratelimit", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}},
		{"headers=none", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}},
		{"keyfunc=RemoteAddrKey", []addrlimit.Option{addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)}},
		{"decision-in-context", []addrlimit.Option{addrlimit.WithDecisionInContext()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, 1_000_000_000, time.Second, append([]addrlimit.Option{addrlimit.WithBurst(300)}, tc.opts...)...)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
	for _, limit := range limits {
		for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderXRateLimit} {
			b.Run(fmt.Sprintf("limit=%d/headers=%s", limit, styleName(style)), func(b *testing.B) {
				lim := mustNew(b, limit, time.Duration(limit)*10*time.Nanosecond, addrlimit.WithHeaders(style))
				benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
			})
		}
	}
}

func styleName(s addrlimit.HeaderStyle) string { return s.String() }

// BenchmarkAllowedDraining: one address draining a bucket of 10^9 that
// refills one token per second, so every response reports a new remaining
// count: after the first 128, values that no table holds, rendered per
// response into the header arena.
func BenchmarkAllowedDraining(b *testing.B) {
	const limit = 1_000_000_000
	lim := mustNew(b, limit, limit*time.Second)
	benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
}

var tenThousand = func() []*http.Request {
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = req(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() + ":1")
	}
	return reqs
}()

// BenchmarkAllowed10k: the addresses of BenchmarkAllowedParallel, served
// serially, so the two compare like with like.
func BenchmarkAllowed10k(b *testing.B) {
	for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderNone} {
		b.Run("headers="+styleName(style), func(b *testing.B) {
			h := mustNew(b, 1<<30, time.Nanosecond<<30, addrlimit.WithHeaders(style)).Handler(noop)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, tenThousand[i])
				if i++; i == len(tenThousand) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkAllowedParallel: 10,000 addresses from all cores.
func BenchmarkAllowedParallel(b *testing.B) {
	for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderNone} {
		b.Run("headers="+styleName(style), func(b *testing.B) {
			h := mustNew(b, 1<<30, time.Nanosecond<<30, addrlimit.WithHeaders(style)).Handler(noop)
			var next atomic.Uint32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				i := int(next.Add(7919))
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, tenThousand[i%len(tenThousand)])
					i++
				}
			})
		})
	}
}

// BenchmarkDenied: the budget is exhausted before the timer starts; the
// default 429 response. limit=1/hour waits past the pre-rendered tables.
func BenchmarkDenied(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit int
		per   time.Duration
		opts  []addrlimit.Option
	}{
		{"limit=300/minute", 300, time.Minute, nil},
		{"limit=1/hour", 1, time.Hour, nil},
		{"limit=300/minute/headers=none", 300, time.Minute, []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, tc.limit, tc.per, tc.opts...)
			r := req("192.0.2.1:1234")
			for range tc.limit {
				lim.Allow(r)
			}
			benchStatus(b, lim.Handler(noop), r, http.StatusTooManyRequests)
		})
	}
}

// BenchmarkExempt: a request carrying the internal token.
func BenchmarkExempt(b *testing.B) {
	tok := mustToken(b, secret)
	lim := mustNew(b, 300, time.Minute, addrlimit.WithInternalToken(tok))
	benchServe(b, lim.Handler(noop), req("192.0.2.1:1234", "Authorization", "Bearer "+secret))
}

// BenchmarkDistinctKeys1M cycles through one million addresses.
func BenchmarkDistinctKeys1M(b *testing.B) {
	const n = 1_000_000
	lim := mustNew(b, 1<<30, time.Nanosecond<<30)
	h := lim.Handler(noop)
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = req(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + ":1")
	}
	w := &discard{h: http.Header{}}
	for _, r := range reqs { // warm the table
		h.ServeHTTP(w, r)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, reqs[i])
		if i++; i == n {
			i = 0
		}
	}
}

var epoch = time.Now()

// BenchmarkFloor is what any limiter that reads the clock and sends the two
// draft fields pays here, with no limiting: compare BenchmarkAllowed with it.
func BenchmarkFloor(b *testing.B) {
	policy, quota := []string{`"default";q=300;w=60`}, []string{`"default";r=299;t=0`}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = time.Since(epoch)
		hd := w.Header()
		hd["Ratelimit-Policy"] = policy
		hd["Ratelimit"] = quota
		noop.ServeHTTP(w, r)
	})
	benchServe(b, h, req("192.0.2.1:1234"))
}
