package headers

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name   string
		style  uint8
		policy string
		burst  int
		ivl    time.Duration
		st     State
		want   http.Header
	}{
		{"draft allowed", Draft, "default", 300, 200 * time.Millisecond, State{Remaining: 299, ResetAfter: 200 * time.Millisecond},
			http.Header{"Ratelimit-Policy": {`"default";q=300;w=60`}, "Ratelimit": {`"default";r=299;t=0`}}},
		{"draft named policy", Draft, "partner", 5000, 12 * time.Millisecond, State{Remaining: 4999},
			http.Header{"Ratelimit-Policy": {`"partner";q=5000;w=60`}, "Ratelimit": {`"partner";r=4999;t=0`}}},
		{"draft last token", Draft, "default", 300, 200 * time.Millisecond, State{Remaining: 0, NextToken: 150 * time.Millisecond, RetryAfter: 150 * time.Millisecond},
			http.Header{"Ratelimit-Policy": {`"default";q=300;w=60`}, "Ratelimit": {`"default";r=0;t=1`}}},
		{"draft denied, long wait past the table", Draft, "a.b_c-D9", 2, 3 * time.Hour, State{NextToken: 2 * time.Hour, RetryAfter: 2 * time.Hour, Denied: true},
			http.Header{"Ratelimit-Policy": {`"a.b_c-D9";q=2;w=21600`}, "Ratelimit": {`"a.b_c-D9";r=0;t=7200`}, "Retry-After": {"7200"}, "Cache-Control": {"no-store"}}},
		{"draft remaining past the table", Draft, "default", 5000, time.Millisecond, State{Remaining: 4000},
			http.Header{"Ratelimit-Policy": {`"default";q=5000;w=5`}, "Ratelimit": {`"default";r=4000;t=0`}}},
		{"draft 10^9", Draft, "default", 1_000_000_000, 60 * time.Nanosecond, State{Remaining: 999_999_999},
			http.Header{"Ratelimit-Policy": {`"default";q=1000000000;w=60`}, "Ratelimit": {`"default";r=999999999;t=0`}}},
		{"draft negative remaining reads as 0", Draft, "default", 10, time.Second, State{Remaining: -3, NextToken: time.Second, RetryAfter: time.Second},
			http.Header{"Ratelimit-Policy": {`"default";q=10;w=10`}, "Ratelimit": {`"default";r=0;t=1`}}},
		{"draft r=0 without a wait still says t=1", Draft, "default", 10, time.Second, State{},
			http.Header{"Ratelimit-Policy": {`"default";q=10;w=10`}, "Ratelimit": {`"default";r=0;t=1`}}},
		{"draft window rounds up", Draft, "default", 3, 400 * time.Millisecond, State{Remaining: 1},
			http.Header{"Ratelimit-Policy": {`"default";q=3;w=2`}, "Ratelimit": {`"default";r=1;t=0`}}},
		{"draft window at least 1", Draft, "default", 1, time.Nanosecond, State{Remaining: 1},
			http.Header{"Ratelimit-Policy": {`"default";q=1;w=1`}, "Ratelimit": {`"default";r=1;t=0`}}},
		{"x-ratelimit", XRateLimit, "default", 10, time.Second, State{Remaining: 3, ResetAfter: 6500 * time.Millisecond},
			http.Header{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"7"}}},
		{"x-ratelimit past the table", XRateLimit, "default", 1_000_000, time.Millisecond, State{Remaining: 999_998, ResetAfter: 2 * time.Millisecond},
			http.Header{"X-Ratelimit-Limit": {"1000000"}, "X-Ratelimit-Remaining": {"999998"}, "X-Ratelimit-Reset": {"1"}}},
		{"x-ratelimit denied", XRateLimit, "default", 5000, time.Second, State{NextToken: 1500 * time.Second, RetryAfter: 1500 * time.Second, ResetAfter: 5000 * time.Second, Denied: true},
			http.Header{"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"5000"}, "Retry-After": {"1500"}, "Cache-Control": {"no-store"}}},
		{"none denied", None, "default", 10, time.Second, State{NextToken: time.Millisecond, RetryAfter: time.Millisecond, Denied: true},
			http.Header{"Retry-After": {"1"}, "Cache-Control": {"no-store"}}},
		{"none allowed", None, "default", 10, time.Second, State{Remaining: 3}, http.Header{}},
		{"draft denied cost: t is the bucket's, Retry-After the request's", Draft, "default", 6, 10 * time.Second, State{NextToken: 10 * time.Second, RetryAfter: 30 * time.Second, Denied: true},
			http.Header{"Ratelimit-Policy": {`"default";q=6;w=60`}, "Ratelimit": {`"default";r=0;t=10`}, "Retry-After": {"30"}, "Cache-Control": {"no-store"}}},
		{"draft denied, never possible: no Retry-After", Draft, "default", 6, 10 * time.Second, State{Remaining: 6, Denied: true, Never: true},
			http.Header{"Ratelimit-Policy": {`"default";q=6;w=60`}, "Ratelimit": {`"default";r=6;t=0`}, "Cache-Control": {"no-store"}}},
		{"none denied, never possible", None, "default", 6, 10 * time.Second, State{Denied: true, Never: true},
			http.Header{"Cache-Control": {"no-store"}}},
	}
	for _, tc := range tests {
		h := http.Header{"Ratelimit": {"stale"}}
		if tc.style != Draft {
			delete(h, "Ratelimit")
		}
		New(tc.style, tc.policy, tc.burst, tc.ivl).Write(h, &tc.st)
		checkHeader(t, tc.name, h, tc.want)
	}
}

// checkHeader compares h with want and checks that every value slice has
// capacity 1, so that appending to it cannot write into another slot.
func checkHeader(t *testing.T, name string, h, want http.Header) {
	t.Helper()
	if len(h) != len(want) {
		t.Errorf("%s: %v, want %v", name, h, want)
		return
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v[0] || cap(got) != 1 {
			t.Errorf("%s: %s = %q (cap %d), want %q", name, k, got, cap(got), v)
		}
	}
}

func TestWriteDenied(t *testing.T) {
	for _, tc := range []struct {
		style  uint8
		status int
		want   http.Header
		body   string
	}{
		{Draft, http.StatusTooManyRequests, http.Header{
			"Ratelimit-Policy": {`"default";q=300;w=60`}, "Ratelimit": {`"default";r=0;t=2`},
			"Retry-After": {"2"}, "Cache-Control": {"no-store"},
			"Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"},
		}, "too many requests\n"},
		{None, http.StatusTooManyRequests, http.Header{
			"Retry-After": {"2"}, "Cache-Control": {"no-store"},
			"Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"},
		}, "too many requests\n"},
	} {
		w := New(tc.style, "default", 300, 200*time.Millisecond)
		h := http.Header{"Content-Length": {"12"}, "Content-Type": {"application/json"}}
		body := w.WriteDenied(h, &State{NextToken: 1100 * time.Millisecond, RetryAfter: 1100 * time.Millisecond, ResetAfter: time.Minute, Denied: true}, tc.status)
		checkHeader(t, fmt.Sprint("style ", tc.style), h, tc.want)
		if string(body) != tc.body {
			t.Errorf("style %d: body %q, want %q", tc.style, body, tc.body)
		}
	}
}

func TestRefusalBodies(t *testing.T) {
	w := New(None, "default", 1, time.Second)
	for status, body := range map[int]string{
		http.StatusTooManyRequests:       "too many requests\n",
		http.StatusServiceUnavailable:    "service unavailable\n",
		http.StatusRequestEntityTooLarge: "content too large\n",
		http.StatusTeapot:                "request refused\n",
	} {
		h := http.Header{"Content-Length": {"3"}}
		got := w.WriteDenied(h, &State{Denied: true, Never: true}, status)
		checkHeader(t, strconv.Itoa(status), h, http.Header{"Cache-Control": {"no-store"}, "Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}})
		if string(got) != body {
			t.Errorf("%d: body %q, want %q", status, got, body)
		}
	}
}

// An unknown quota (the store failed under FailOpen or FailClosed) gets no
// quota fields in any style: nothing when allowed; Retry-After and
// Cache-Control when denied (FailClosed's 503), and no Retry-After for a
// cost over the burst.
func TestUnknownQuotaWritesNoQuotaFields(t *testing.T) {
	for _, style := range []uint8{Draft, XRateLimit, None} {
		w := New(style, "default", 10, time.Second)
		h := http.Header{}
		w.Write(h, &State{Unknown: true, Remaining: 5, ResetAfter: time.Second})
		checkHeader(t, fmt.Sprint("allowed, style ", style), h, http.Header{})
		h = http.Header{}
		body := w.WriteDenied(h, &State{Unknown: true, RetryAfter: time.Second, Denied: true}, http.StatusServiceUnavailable)
		checkHeader(t, fmt.Sprint("503, style ", style), h, http.Header{"Retry-After": {"1"}, "Cache-Control": {"no-store"}, "Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}})
		if string(body) != "service unavailable\n" {
			t.Errorf("style %d: body %q", style, body)
		}
		h = http.Header{}
		w.WriteDenied(h, &State{Unknown: true, Denied: true, Never: true}, http.StatusRequestEntityTooLarge)
		checkHeader(t, fmt.Sprint("413, style ", style), h, http.Header{"Cache-Control": {"no-store"}, "Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}})
	}
}

func TestNewRejectsWhatTheCallerMustValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		burst int
		ivl   time.Duration
	}{
		{"", 1, time.Second},
		{`a"b`, 1, time.Second},
		{"a;q=1", 1, time.Second},
		{"a b", 1, time.Second},
		{"é", 1, time.Second},
		{string(make([]byte, 65)), 1, time.Second},
		{"ok", 0, time.Second},
		{"ok", 1, 0},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%q, %d, %v) did not panic", tc.name, tc.burst, tc.ivl)
				}
			}()
			New(Draft, tc.name, tc.burst, tc.ivl)
		}()
	}
	New(Draft, "A-Za-z0.9_"+strings.Repeat("x", 54), 1, time.Second) // 64 bytes is the longest valid name
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		burst int
		ivl   time.Duration
		want  int
	}{
		{300, 200 * time.Millisecond, 60},
		{1, time.Nanosecond, 1},
		{3, 333_333_334, 2},
		{1_000_000_000, time.Hour, 3_600_000_000_000},
		{math.MaxInt64, time.Duration(math.MaxInt64), 1 << 62},
		{math.MaxInt64, time.Nanosecond, 9_223_372_037},
	} {
		if got := Window(tc.burst, tc.ivl); got != tc.want {
			t.Errorf("Window(%d, %v) = %d, want %d", tc.burst, tc.ivl, got, tc.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		-time.Second: 0, 0: 0, 1: 1, time.Second: 1, time.Second + 1: 2,
		time.Duration(math.MaxInt64): 9_223_372_037,
	} {
		if got := Seconds(d); got != want {
			t.Errorf("Seconds(%d) = %d, want %d", d, got, want)
		}
	}
}

// Every response owns its slots and the bytes of its rendered values: keep
// many responses, rendered from several goroutines through shared Writers,
// then check that each still holds exactly its own values, and that editing
// one response's values in place changes no other.
func TestResponsesShareNothingMutable(t *testing.T) {
	writers := []*Writer{
		New(Draft, "p", 1_000_000_000, time.Nanosecond),
		New(XRateLimit, "p", 1_000_000_000, time.Nanosecond),
	}
	const goroutines, perG = 4, 3 * chunkSlots
	type kept struct {
		h    http.Header
		want http.Header
	}
	results := make([][]kept, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				n := 1_000_000 + g*perG + i // past the tables: rendered into arena bytes
				w := writers[i%len(writers)]
				h := http.Header{}
				st := State{Remaining: n, ResetAfter: time.Duration(n) * time.Second, NextToken: time.Duration(n) * time.Second, RetryAfter: time.Duration(n) * time.Second, Denied: i%3 == 0}
				w.Write(h, &st)
				results[g] = append(results[g], kept{h, reference(w, "p", st)})
			}
		})
	}
	wg.Wait()
	for g := range results {
		for i, k := range results[g] {
			checkHeader(t, fmt.Sprintf("goroutine %d response %d", g, i), k.h, k.want)
		}
	}
	a, b := results[0][0].h, results[0][2].h
	a["Ratelimit"][0] = "edited"
	if b["Ratelimit"][0] == "edited" {
		t.Fatal("two responses share a value slot")
	}
	a["Ratelimit-Policy"] = append(a["Ratelimit-Policy"], "appended")
	if _, ok := a["Ratelimit"]; !ok || results[0][0].h["Ratelimit"][0] != "edited" {
		t.Fatal("append wrote into another field's slot")
	}
}

// A sequence of responses through one Writer, so that rendered values are
// reused (or must not be) across responses.
func TestWriteSequence(t *testing.T) {
	for _, style := range []uint8{Draft, XRateLimit, None} {
		w := New(style, "seq", 1_000_000, time.Hour)
		for i, st := range []State{
			{NextToken: 2000 * time.Second, RetryAfter: 2000 * time.Second, Denied: true},
			{NextToken: 2000 * time.Second, RetryAfter: 2000 * time.Second, Denied: true},
			{NextToken: 1999500 * time.Millisecond, RetryAfter: 1999500 * time.Millisecond, Denied: true},
			{NextToken: 3000 * time.Second, RetryAfter: 3000 * time.Second, Denied: true},
			{Remaining: 3000, ResetAfter: 3000 * time.Second},
			{NextToken: 2000 * time.Second, RetryAfter: 2000 * time.Second, Denied: true},
			{Remaining: 500_000, ResetAfter: 2000 * time.Second},
			{Remaining: 500_000, ResetAfter: 2000 * time.Second},
			{Remaining: 0, NextToken: 3000 * time.Second, RetryAfter: 3000 * time.Second},
			{Remaining: 999_999},
			{Remaining: 999_873},
			{Remaining: 999_872},
		} {
			h := http.Header{}
			w.Write(h, &st)
			checkHeader(t, fmt.Sprintf("style %d, response %d", style, i), h, reference(w, "seq", st))
		}
	}
}

// reference renders the fields of st the obvious way.
func reference(w *Writer, name string, st State) http.Header {
	h := http.Header{}
	r, t := max(st.Remaining, 0), 0
	if r == 0 {
		t = max(Seconds(st.NextToken), 1)
	}
	switch w.style {
	case Draft:
		h["Ratelimit-Policy"] = []string{w.policy}
		h["Ratelimit"] = []string{fmt.Sprintf(`"%s";r=%d;t=%d`, name, r, t)}
	case XRateLimit:
		h["X-Ratelimit-Limit"] = []string{w.limit}
		h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(r)}
		h["X-Ratelimit-Reset"] = []string{strconv.Itoa(Seconds(st.ResetAfter))}
	}
	if st.Denied {
		if !st.Never {
			h["Retry-After"] = []string{strconv.Itoa(max(Seconds(st.RetryAfter), 1))}
		}
		h["Cache-Control"] = []string{"no-store"}
	}
	return h
}

func FuzzWrite(f *testing.F) {
	f.Add(uint8(0), "default", 300, int64(200*time.Millisecond), 299, int64(0), int64(time.Second), false)
	f.Add(uint8(1), "x", 1_000_000_000, int64(60), 999_999_999, int64(60), int64(time.Hour), true)
	f.Add(uint8(2), "p", 1, int64(1), 0, int64(math.MaxInt64), int64(-1), true)
	f.Fuzz(func(t *testing.T, style uint8, name string, burst int, ivl int64, remaining int, retry, reset int64, denied bool) {
		if CheckName(name) != nil || burst < 1 || ivl <= 0 {
			return
		}
		w := New(style%3, name, burst, time.Duration(ivl))
		st := State{Remaining: remaining, NextToken: time.Duration(retry), RetryAfter: time.Duration(retry) * 3, ResetAfter: time.Duration(reset), Denied: denied, Never: denied && reset%2 == 0}
		h := http.Header{}
		w.Write(h, &st)
		checkHeader(t, "fuzz", h, reference(w, name, st))
		fields := http.Header{}
		w.Fields(&st, func(name, value string) { fields[name] = append(fields[name], value) })
		for k, v := range h {
			if k != "Retry-After" && k != "Cache-Control" && !slices.Equal(fields[strings.ToLower(k)], v) {
				t.Fatalf("Fields %s = %q, Write %q", strings.ToLower(k), fields[strings.ToLower(k)], v)
			}
			delete(fields, strings.ToLower(k))
		}
		if len(fields) > 0 {
			t.Fatalf("Fields set %v, which Write does not", fields)
		}
		if w.style == Draft && w.policy != fmt.Sprintf(`"%s";q=%d;w=%d`, name, burst, Window(burst, time.Duration(ivl))) {
			t.Fatalf("policy %q", w.policy)
		}
	})
}

func TestWriteAllocatesNothing(t *testing.T) {
	for _, burst := range []int{300, 5000, 1_000_000, 1_000_000_000} {
		w := New(Draft, "default", burst, time.Millisecond)
		x := New(XRateLimit, "default", burst, time.Millisecond)
		h := http.Header{}
		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"allowed", func() { w.Write(h, &State{Remaining: burst - 1}) }},
			{"allowed, half full", func() { w.Write(h, &State{Remaining: burst / 2}) }},
			{"x-ratelimit", func() { x.Write(h, &State{Remaining: burst - 1, ResetAfter: time.Duration(burst) * time.Second}) }},
			{"denied", func() {
				w.WriteDenied(h, &State{NextToken: time.Duration(burst) * time.Second, RetryAfter: time.Duration(burst) * time.Second, Denied: true}, http.StatusTooManyRequests)
			}},
		} {
			// Chunk allocations, one per 32 responses or more, round down to 0.
			if got := testing.AllocsPerRun(1000, func() { clear(h); tc.f() }); got != 0 {
				t.Errorf("burst %d, %s: %v allocations per response", burst, tc.name, got)
			}
		}
	}
}

// BenchmarkWrite: a client with a full bucket (r = burst-1, from a table)
// and one halfway down a large bucket (rendered into the arena).
func BenchmarkWrite(b *testing.B) {
	for _, burst := range []int{300, 5000, 1_000_000, 1_000_000_000} {
		for _, r := range []struct {
			name string
			r    int
		}{{"full", burst - 1}, {"half", burst / 2}} {
			b.Run(fmt.Sprintf("burst=%d/bucket=%s", burst, r.name), func(b *testing.B) {
				w := New(Draft, "default", burst, time.Millisecond)
				h := http.Header{}
				b.ReportAllocs()
				for b.Loop() {
					clear(h)
					w.Write(h, &State{Remaining: r.r})
				}
			})
		}
	}
}

func BenchmarkWriteDenied(b *testing.B) {
	w := New(Draft, "default", 300, 200*time.Millisecond)
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		w.WriteDenied(h, &State{NextToken: 150 * time.Millisecond, RetryAfter: 150 * time.Millisecond, Denied: true}, http.StatusTooManyRequests)
	}
}

func BenchmarkClearOnly(b *testing.B) {
	h := http.Header{}
	for b.Loop() {
		clear(h)
	}
}

func TestPutUint(t *testing.T) {
	check := func(v uint64) {
		var b [maxDigits]byte
		if got, want := string(b[:putUint(b[:], v)]), strconv.FormatUint(v, 10); got != want {
			t.Fatalf("putUint(%d) = %q", v, got)
		}
	}
	for _, p := range pow10 {
		for _, d := range []uint64{0, 1, 9, 10, 11, 99} {
			check(p + d)
			check(p - 1 + d)
		}
	}
	check(math.MaxUint64)
	check(math.MaxUint64 - 1)
	for v := uint64(0); v < 100_000; v++ {
		check(v)
	}
}

// BenchmarkInsertsOnly is the floor of BenchmarkWrite: the two draft fields
// set from fixed slices, no arena.
func BenchmarkInsertsOnly(b *testing.B) {
	h := http.Header{}
	policy, quota := []string{`"default";q=300;w=60`}, []string{`"default";r=299;t=0`}
	for b.Loop() {
		clear(h)
		h[fieldPolicy] = policy
		h[fieldRateLimit] = quota
	}
}

// A chunk wastes less than one slot of its allocation size class.
func TestChunkSize(t *testing.T) {
	if got := unsafe.Sizeof(chunk{}); got > chunkSize || got <= chunkSize-16 {
		t.Fatalf("a chunk is %d bytes, want (%d, %d]", got, chunkSize-16, chunkSize)
	}
}
