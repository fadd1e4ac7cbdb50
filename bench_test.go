package addrlimit_test

import (
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// discard is a reusable ResponseWriter whose header map is cleared per call.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var noop = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

func benchServe(b *testing.B, h http.Handler, r *http.Request) {
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// BenchmarkAllowed: one address, a budget that never runs out.
func BenchmarkAllowed(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"headers=draft", nil},
		{"headers=x-ratelimit", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}},
		{"headers=none", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}},
		{"keyfunc=RemoteAddrKey", []addrlimit.Option{addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, 1_000_000_000, time.Second, append([]addrlimit.Option{addrlimit.WithBurst(300)}, tc.opts...)...)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
}

// BenchmarkAllowedParallel: 10,000 addresses from all cores.
func BenchmarkAllowedParallel(b *testing.B) {
	lim := mustNew(b, 1<<30, time.Nanosecond<<30)
	h := lim.Handler(noop)
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = req(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() + ":1")
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		i := int(next.Add(7919))
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		}
	})
}

// BenchmarkDenied: the budget is exhausted before the timer starts.
func BenchmarkDenied(b *testing.B) {
	lim := mustNew(b, 1, time.Hour)
	r := req("192.0.2.1:1234")
	lim.Allow(r)
	benchServe(b, lim.Handler(noop), r)
}

// BenchmarkExempt: a request carrying the internal token.
func BenchmarkExempt(b *testing.B) {
	tok := mustToken(b, secret)
	lim := mustNew(b, 300, time.Minute, addrlimit.WithExempt(tok.Match))
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
