package headers

import (
	"net/http"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name  string
		style Style
		burst int
		ivl   time.Duration
		st    State
		want  http.Header
	}{
		{"draft allowed", Draft, 300, 200 * time.Millisecond, State{Remaining: 299, ResetAfter: 200 * time.Millisecond},
			http.Header{"Ratelimit-Policy": {`"default";q=300;w=60`}, "Ratelimit": {`"default";r=299;t=0`}}},
		{"draft last token", Draft, 300, 200 * time.Millisecond, State{Remaining: 0, RetryAfter: 150 * time.Millisecond},
			http.Header{"Ratelimit-Policy": {`"default";q=300;w=60`}, "Ratelimit": {`"default";r=0;t=1`}}},
		{"draft denied, long wait past the table", Draft, 2, 3 * time.Hour, State{RetryAfter: 2 * time.Hour, Denied: true},
			http.Header{"Ratelimit-Policy": {`"default";q=2;w=21600`}, "Ratelimit": {`"default";r=0;t=7200`}, "Retry-After": {"7200"}, "Cache-Control": {"no-store"}}},
		{"draft remaining past the table", Draft, 5000, time.Millisecond, State{Remaining: 4000},
			http.Header{"Ratelimit-Policy": {`"default";q=5000;w=5`}, "Ratelimit": {`"default";r=4000;t=0`}}},
		{"x-ratelimit", XRateLimit, 10, time.Second, State{Remaining: 3, ResetAfter: 6500 * time.Millisecond},
			http.Header{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"7"}}},
		{"none denied", None, 10, time.Second, State{RetryAfter: time.Millisecond, Denied: true},
			http.Header{"Retry-After": {"1"}, "Cache-Control": {"no-store"}}},
		{"none allowed", None, 10, time.Second, State{Remaining: 3}, http.Header{}},
	}
	for _, tc := range tests {
		h := http.Header{"Ratelimit": {"stale"}}
		if tc.style != Draft {
			delete(h, "Ratelimit")
		}
		New(tc.style, "default", tc.burst, tc.ivl).Write(h, tc.st)
		if len(h) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, h, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got := h[k]; len(got) != 1 || got[0] != v[0] || cap(got) != 1 {
				t.Errorf("%s: %s = %q (cap %d), want %q", tc.name, k, got, cap(got), v)
			}
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	w := New(Draft, "default", 300, 200*time.Millisecond)
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		w.Write(h, State{Remaining: 299})
	}
}

func BenchmarkClearOnly(b *testing.B) {
	h := http.Header{}
	for b.Loop() {
		clear(h)
	}
}
