package benchmarks

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// The configurations compared must mean the same thing: 300 at once from one
// address, then 429; another address unaffected.
func TestContendersEnforceTheSamePolicy(t *testing.T) {
	for _, c := range Contenders {
		t.Run(c.Name, func(t *testing.T) {
			h, err := c.New(Incident)
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = Addr(1)
			ok := 0
			for range 400 {
				clear(w.H)
				w.Code = 0
				h.ServeHTTP(w, r)
				if w.Code == http.StatusOK {
					ok++
				} else if w.Code != http.StatusTooManyRequests {
					t.Fatalf("status %d", w.Code)
				}
			}
			if ok != 300 {
				t.Fatalf("allowed %d of 400 from one address, want 300", ok)
			}
			r.RemoteAddr = Addr(2)
			clear(w.H)
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("another address got %d", w.Code)
			}
		})
	}
}

func serial(b *testing.B, h http.Handler, addrs []string) {
	w := NewWriter()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = addrs[0]
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	i := 0
	for b.Loop() {
		clear(w.H)
		r.RemoteAddr = addrs[i]
		h.ServeHTTP(w, r)
		if i++; i == len(addrs) {
			i = 0
		}
	}
}

// reportCPU reports the CPU time the process used since start (cpuTime) per
// operation, as cpu-ns/op: unlike ns/op, time the benchmark spent waiting for
// a core that other processes held does not count, so on a loaded machine it
// is the steadier figure. With several goroutines it adds up their cores.
func reportCPU(b *testing.B, start time.Duration) {
	if start > 0 && b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

func each(b *testing.B, p Policy, f func(b *testing.B, h http.Handler)) {
	for _, c := range Contenders {
		b.Run("lib="+c.Name, func(b *testing.B) {
			h, err := c.New(p)
			if err != nil {
				b.Fatal(err)
			}
			f(b, h)
		})
	}
}

// BenchmarkAllowed: one address, serial, a budget that never runs out.
func BenchmarkAllowed(b *testing.B) {
	each(b, Unlimited, func(b *testing.B, h http.Handler) { serial(b, h, []string{Addr(1)}) })
	b.Run("lib=addrlimit-noheaders", func(b *testing.B) { serial(b, noHeaders(), []string{Addr(1)}) })
}

// BenchmarkExempt: addrlimit only, a request with the internal token; compare
// with BenchmarkAllowed/lib=addrlimit.
func BenchmarkExempt(b *testing.B) {
	b.Run("lib=addrlimit", func(b *testing.B) {
		const secret = "internal-secret-0123456789abcdef"
		tok, _ := addrlimit.NewInternalToken(secret)
		lim, _ := addrlimit.New(Unlimited.Limit, Unlimited.Per, addrlimit.WithBurst(Unlimited.Burst), addrlimit.WithExempt(tok.Match))
		h := lim.Handler(OK)
		w := NewWriter()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = Addr(1)
		r.Header.Set("Authorization", "Bearer "+secret)
		b.ReportAllocs()
		for b.Loop() {
			clear(w.H)
			h.ServeHTTP(w, r)
		}
	})
}

var tenThousand = func() []string {
	a := make([]string, 10_000)
	for i := range a {
		a[i] = Addr(i)
	}
	return a
}()

// BenchmarkAllowed10k: the address set of BenchmarkAllowedParallel, served
// serially, so that the two compare like with like (the one-address figure
// also measures a hot cache).
func BenchmarkAllowed10k(b *testing.B) {
	each(b, Unlimited, func(b *testing.B, h http.Handler) { serial(b, h, tenThousand) })
	b.Run("lib=addrlimit-noheaders", func(b *testing.B) { serial(b, noHeaders(), tenThousand) })
}

// noHeaders is addrlimit with WithHeaders(HeaderNone) under Unlimited.
func noHeaders() http.Handler {
	h, err := Handler(NoHeaders, Unlimited)
	if err != nil {
		panic(err)
	}
	return h
}

// BenchmarkAllowedParallel: 10,000 addresses from every core.
func BenchmarkAllowedParallel(b *testing.B) {
	reqs := make([]*http.Request, len(tenThousand))
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = tenThousand[i]
	}
	parallel := func(b *testing.B, h http.Handler) {
		var seq atomic.Int64
		b.ReportAllocs()
		defer reportCPU(b, cpuTime())
		b.RunParallel(func(pb *testing.PB) {
			w := NewWriter()
			i := int(seq.Add(1) * 7919)
			for pb.Next() {
				clear(w.H)
				h.ServeHTTP(w, reqs[i%len(reqs)])
				i++
			}
		})
	}
	each(b, Unlimited, parallel)
	b.Run("lib=addrlimit-noheaders", func(b *testing.B) { parallel(b, noHeaders()) })
}

// BenchmarkDenied: the incident policy, budget exhausted before the timer.
func BenchmarkDenied(b *testing.B) {
	each(b, Incident, func(b *testing.B, h http.Handler) {
		w := NewWriter()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = Addr(1)
		for range Incident.Burst + 1 {
			clear(w.H)
			h.ServeHTTP(w, r)
		}
		if w.Code != http.StatusTooManyRequests {
			b.Fatalf("budget not exhausted: %d", w.Code)
		}
		serial(b, h, []string{Addr(1)})
	})
}

// Limits are the limits of the cliff target: the header values of any limit
// cost the same.
var Limits = []int{300, 5000, 1_000_000, 1_000_000_000}

// BenchmarkAllowedLimits: one address, burst = limit, a token every 10 ns so
// that the budget never runs out: every response reports a full bucket
// (remaining = limit-1), the state of a client below its limit.
func BenchmarkAllowedLimits(b *testing.B) {
	for _, limit := range Limits {
		p := Policy{Limit: limit, Per: time.Duration(limit) * 10 * time.Nanosecond, Burst: limit}
		for _, lib := range []string{"addrlimit", NoHeaders} {
			b.Run(fmt.Sprintf("limit=%d/lib=%s", limit, lib), func(b *testing.B) {
				h, err := Handler(lib, p)
				if err != nil {
					b.Fatal(err)
				}
				serial(b, h, []string{Addr(1)})
			})
		}
	}
}

// BenchmarkAllowedDraining: one address draining a bucket of 10^9 that
// refills one token per second, so that every response reports a new
// remaining count: after the first 128, values that no table holds, rendered
// per response.
func BenchmarkAllowedDraining(b *testing.B) {
	const limit = 1_000_000_000
	p := Policy{Limit: limit, Per: limit * time.Second, Burst: limit}
	b.Run(fmt.Sprintf("limit=%d/lib=addrlimit", limit), func(b *testing.B) {
		h, err := Handler("addrlimit", p)
		if err != nil {
			b.Fatal(err)
		}
		w := NewWriter()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = Addr(1)
		b.ReportAllocs()
		for b.Loop() {
			clear(w.H)
			h.ServeHTTP(w, r)
		}
		if w.Code != http.StatusOK || w.H.Get("RateLimit") == "" {
			b.Fatalf("budget ran out: %d %v", w.Code, w.H)
		}
	})
}

// BenchmarkDistinctKeys1M: one million addresses cycled, table warmed first.
// The addresses are built here, not at package init, so that the other
// workloads do not run with their 40 MB live on the heap: it would make
// every garbage collection cycle of theirs longer.
func BenchmarkDistinctKeys1M(b *testing.B) {
	million := make([]string, 1_000_000)
	for i := range million {
		million[i] = Addr(i)
	}
	each(b, Incident, func(b *testing.B, h http.Handler) {
		w := NewWriter()
		r := httptest.NewRequest("GET", "/", nil)
		for _, a := range million {
			clear(w.H)
			r.RemoteAddr = a
			h.ServeHTTP(w, r)
		}
		serial(b, h, million)
	})
}

var epoch = time.Now()

// BenchmarkFloor measures what any limiter that reads the clock and sends the
// two draft header fields must pay on this machine, with no limiting at all:
// the lower bound of the allowed path.
func BenchmarkFloor(b *testing.B) {
	policy, quota := []string{`"default";q=300;w=60`}, []string{`"default";r=299;t=0`}
	b.Run("lib=clock", func(b *testing.B) {
		var sink time.Duration
		for b.Loop() {
			sink += time.Since(epoch)
		}
		_ = sink
	})
	// How well this machine runs two CPU-bound goroutines at once: ideally
	// half of lib=clock.
	b.Run("lib=clock-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var sink time.Duration
			for pb.Next() {
				sink += time.Since(epoch)
			}
			_ = sink
		})
	})
	b.Run("lib=clock+headers", func(b *testing.B) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = time.Since(epoch)
			hd := w.Header()
			hd["Ratelimit-Policy"] = policy
			hd["Ratelimit"] = quota
			OK.ServeHTTP(w, r)
		})
		serial(b, h, []string{Addr(1)})
	})
}
