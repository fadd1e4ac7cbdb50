package addrlimit_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// The benchmarks of this file measure options of this package that the
// benchmarks/ module, which compares addrlimit with its peers and writes
// BENCHMARKS.md, does not: the X-RateLimit header style, the RemoteAddrKey
// key function, and refusals past the pre-rendered header tables. Their
// baselines are there (cd benchmarks && go test -bench 'Allowed$|AllowedLimits|Denied'):
// lib=addrlimit (draft headers) and lib=addrlimit-noheaders.

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

// BenchmarkAllowedOptions: one address, a budget that never runs out. The
// limit=N cases have burst = limit and a token every 10 ns, so every response
// reports a full bucket (remaining = limit-1), the state of a client below
// its limit; the values differ per limit (the limits of the cliff target).
func BenchmarkAllowedOptions(b *testing.B) {
	xrl := addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)
	for _, tc := range []struct {
		name string
		opt  addrlimit.Option
	}{
		{"headers=x-ratelimit", xrl},
		{"keyfunc=RemoteAddrKey", addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)},
		{"decision-in-context", addrlimit.WithDecisionInContext()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, 1_000_000_000, time.Second, addrlimit.WithBurst(300), tc.opt)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
	for _, limit := range []int{300, 5000, 1_000_000, 1_000_000_000} {
		b.Run(fmt.Sprintf("limit=%d/headers=x-ratelimit", limit), func(b *testing.B) {
			lim := mustNew(b, limit, time.Duration(limit)*10*time.Nanosecond, xrl)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
}

// BenchmarkDeniedOptions: the budget is exhausted before the timer starts.
// limit=1/hour waits past the pre-rendered tables.
func BenchmarkDeniedOptions(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit int
		per   time.Duration
		opts  []addrlimit.Option
	}{
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

// BenchmarkLimits: an allowed request on one hot address under a policy of
// one limit and of three (10/s, 300/min, 10,000/day scaled so that the
// budget never runs out), without quota fields (the decision alone) and
// with the draft fields (one list member per limit).
func BenchmarkLimits(b *testing.B) {
	for _, headers := range []addrlimit.HeaderStyle{addrlimit.HeaderNone, addrlimit.HeaderDraft} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("headers=%v/limits=%d", headers, n), func(b *testing.B) {
				opts := []addrlimit.Option{addrlimit.WithHeaders(headers)}
				if n == 3 {
					opts = append(opts, addrlimit.WithLimit(1_000_000_000, time.Minute), addrlimit.WithLimit(1_000_000_000, time.Hour))
				}
				lim := mustNew(b, 1_000_000_000, time.Second, opts...)
				benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
			})
		}
	}
}

// BenchmarkInFlight: one address below its rate, served through Handler
// without an in-flight limit (none) and with one (inflight=2: a slot taken
// and released per request). Compare the two within one run; on a loaded
// machine interleave runs (-count) and compare medians.
func BenchmarkInFlight(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
	}{
		{"none", nil},
		{"inflight=2", []addrlimit.Option{addrlimit.WithInFlight(2)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := mustNew(b, 1_000_000_000, time.Second, append(tc.opts, addrlimit.WithBurst(300), addrlimit.WithHeaders(addrlimit.HeaderNone))...)
			benchServe(b, lim.Handler(noop), req("192.0.2.1:1234"))
		})
	}
}
