package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
)

const secret = "s3cr3t-internal-token-0123456789"

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// req builds a request from remote with header fields given as name, value pairs.
func req(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func mustNew(t testing.TB, limit int, per time.Duration, opts ...addrlimit.Option) *addrlimit.Limiter {
	t.Helper()
	l, err := addrlimit.New(limit, per, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustToken(t testing.TB, secrets ...string) *addrlimit.InternalToken {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// codes serves n copies of r (fresh each time) and returns the status codes.
func codes(h http.Handler, n int, mk func() *http.Request) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = serve(h, mk()).Code
	}
	return out
}

func count(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// TestIncident replays the three observations of the incident write-up.
func TestIncident(t *testing.T) {
	tok := mustToken(t, secret)
	shared := "10.1.2.3:40000"

	t.Run("internal traffic with the token is never limited", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared, "Authorization", "Bearer "+secret) })
		if n := count(got, 200); n != 20 {
			t.Fatalf("internal requests allowed = %d of 20, codes %v", n, got)
		}
	})
	t.Run("ordinary requests from one address get exactly the limit", func(t *testing.T) {
		h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
		got := codes(h, 20, func() *http.Request { return req(shared) })
		for i, c := range got {
			if want := map[bool]int{true: 200, false: 429}[i < 5]; c != want {
				t.Fatalf("request %d: code %d, want %d (all: %v)", i+1, c, want, got)
			}
		}
	})
	forged := []struct {
		name   string
		fields []string
	}{
		{"same length", []string{"Authorization", "Bearer " + strings.Repeat("x", len(secret))}},
		{"other length", []string{"Authorization", "Bearer short-wrong-token"}},
		{"prefix of the secret", []string{"Authorization", "Bearer " + secret[:len(secret)-1]}},
		{"secret plus a byte", []string{"Authorization", "Bearer " + secret + "x"}},
		{"empty token", []string{"Authorization", "Bearer "}},
		{"empty header", []string{"Authorization", ""}},
		{"wrong scheme", []string{"Authorization", "Basic " + secret}},
		{"no scheme", []string{"Authorization", secret}},
		{"token in another header", []string{"X-Internal-Token", secret}},
		{"two Authorization headers", []string{"Authorization", "Bearer " + secret, "Authorization", "Bearer " + secret}},
		{"secret with trailing garbage", []string{"Authorization", "Bearer " + secret + " x"}},
	}
	for _, tc := range forged {
		t.Run("forged token is limited like anyone: "+tc.name, func(t *testing.T) {
			h := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match)).Handler(okHandler)
			got := codes(h, 20, func() *http.Request { return req(shared, tc.fields...) })
			if n := count(got, 200); n != 5 {
				t.Fatalf("allowed %d of 20, want 5: %v", n, got)
			}
			internal := tok.Require(okHandler)
			if c := serve(internal, req(shared, tc.fields...)).Code; c != http.StatusUnauthorized {
				t.Fatalf("internal route answered %d, want 401", c)
			}
		})
	}
}

func TestExemptConsumesNothing(t *testing.T) {
	tok := mustToken(t, secret)
	var seen []addrlimit.Decision
	lim := mustNew(t, 5, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) { seen = append(seen, d) }))
	h := lim.Handler(okHandler)
	for range 20 {
		w := serve(h, req("10.1.2.3:1", "Authorization", "bearer "+secret))
		if w.Code != 200 {
			t.Fatalf("exempt request got %d", w.Code)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				t.Fatalf("exempt response has %s: %q", f, v)
			}
		}
	}
	if got := lim.Stats().Keys; got != 0 {
		t.Fatalf("exempt traffic created %d buckets", got)
	}
	for i, d := range seen {
		if d != (addrlimit.Decision{Outcome: addrlimit.Exempt}) {
			t.Fatalf("decision %d = %+v, want a bare Exempt", i, d)
		}
	}
	got := codes(h, 6, func() *http.Request { return req("10.1.2.3:2") })
	if want := []int{200, 200, 200, 200, 200, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 20 exempt requests the address got %v, want %v", got, want)
	}
	if s := lim.Stats(); s.Exempt != 20 || s.Allowed != 5 || s.Limited != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestKeying(t *testing.T) {
	tests := []struct {
		name       string
		a, b       *http.Request
		sameBucket bool
	}{
		{"different IPv4 addresses", req("192.0.2.1:1000"), req("192.0.2.2:1000"), false},
		{"port ignored", req("192.0.2.1:1000"), req("192.0.2.1:2000"), true},
		{"bare IP as RemoteAddr", req("192.0.2.1"), req("192.0.2.1:2000"), true},
		{"one IPv6 /64 shares a bucket", req("[2001:db8:1:2::1]:1"), req("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2"), true},
		{"neighbouring IPv6 /64s are separate", req("[2001:db8:1:2::1]:1"), req("[2001:db8:1:3::1]:1"), false},
		{"IPv4-mapped equals IPv4", req("[::ffff:192.0.2.1]:1"), req("192.0.2.1:1"), true},
		{"two IPv4-mapped addresses stay apart (CVE-2026-30827)", req("[::ffff:192.0.2.1]:1"), req("[::ffff:192.0.2.2]:1"), false},
		{"IPv4-mapped is not grouped with the IPv6 ::/64", req("[::ffff:192.0.2.1]:1"), req("[::1]:1"), false},
		{"zones ignored", req("[fe80::1%eth0]:1"), req("[fe80::1%eth1]:1"), true},
		{"X-Forwarded-For ignored", req("192.0.2.1:1", "X-Forwarded-For", "198.51.100.1"), req("192.0.2.1:1", "X-Forwarded-For", "198.51.100.2"), true},
		{"X-Real-IP ignored", req("192.0.2.1:1", "X-Real-IP", "198.51.100.1"), req("192.0.2.1:1", "X-Real-IP", "198.51.100.2"), true},
		{"Forwarded ignored", req("192.0.2.1:1", "Forwarded", "for=198.51.100.1"), req("192.0.2.1:1", "Forwarded", "for=198.51.100.2"), true},
		{"True-Client-IP ignored", req("192.0.2.1:1", "True-Client-IP", "198.51.100.1"), req("192.0.2.1:1"), true},
		{"spoofed header naming another client does not reach its bucket", req("192.0.2.1:1"), req("192.0.2.2:1", "X-Forwarded-For", "192.0.2.1"), false},
		{"unparsable RemoteAddrs share the unkeyed bucket", req("not-an-ip"), req("@"), true},
		{"unparsable RemoteAddr is not an address's bucket", req("not-an-ip"), req("192.0.2.1:1"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := mustNew(t, 1, time.Hour)
			if d := lim.Allow(tc.a); d.Outcome != addrlimit.Allowed {
				t.Fatalf("first request: %v", d.Outcome)
			}
			d := lim.Allow(tc.b)
			if got := d.Outcome == addrlimit.Limited; got != tc.sameBucket {
				t.Fatalf("second request %v (key %q), want same bucket = %v", d.Outcome, d.Key, tc.sameBucket)
			}
		})
	}
}

func TestAddrKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::/64"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
	}
	for _, tc := range tests {
		if got := addrlimit.AddrKey(netip.MustParseAddr(tc.in)); got != tc.want {
			t.Errorf("AddrKey(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := addrlimit.AddrKey(netip.Addr{}); got != "" {
		t.Errorf("AddrKey(zero) = %q, want empty", got)
	}
}

func TestRemoteAddrKeyErrors(t *testing.T) {
	for _, ra := range []string{"", "@", "example.com:80", "192.0.2.1:", "[::1", "1.2.3.4.5:6"} {
		if k, err := addrlimit.RemoteAddrKey(req(ra)); err == nil {
			t.Errorf("RemoteAddrKey(%q) = %q, want an error", ra, k)
		}
	}
}

func TestKeyErrorsAreNeverABypass(t *testing.T) {
	keyErr := errors.New("boom")
	tests := []struct {
		name string
		kf   addrlimit.KeyFunc
		want string // Decision.Key
	}{
		{"error and no key", func(*http.Request) (string, error) { return "", keyErr }, addrlimit.UnkeyedKey},
		{"empty key without error", func(*http.Request) (string, error) { return "", nil }, addrlimit.UnkeyedKey},
		{"error with a key is a warning", func(*http.Request) (string, error) { return "k", keyErr }, "k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var errs []error
			lim := mustNew(t, 2, time.Hour, addrlimit.WithKeyFunc(tc.kf),
				addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) { errs = append(errs, d.Err) }))
			h := lim.Handler(okHandler)
			got := codes(h, 4, func() *http.Request { return req("192.0.2.1:1") })
			if fmt.Sprint(got) != "[200 200 429 429]" {
				t.Fatalf("codes %v", got)
			}
			if d := lim.Allow(req("192.0.2.9:1")); d.Key != tc.want || d.Err == nil {
				t.Fatalf("decision %+v, want key %q and an error", d, tc.want)
			}
			for _, err := range errs {
				if err == nil {
					t.Fatal("observer was not told the key error")
				}
			}
			if s := lim.Stats(); s.KeyErrors != 5 {
				t.Fatalf("KeyErrors = %d, want 5", s.KeyErrors)
			}
		})
	}
}

func TestExactUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []addrlimit.Option
		kf   bool
	}{
		{"default key", nil, false},
		{"custom key function", []addrlimit.Option{addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const burst, workers, each = 100, 32, 40
			lim := mustNew(t, burst, time.Hour, tc.opts...)
			h := lim.Handler(okHandler)
			var ok atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range each {
						if serve(h, req(fmt.Sprintf("203.0.113.7:%d", 1000+w))).Code == 200 {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := ok.Load(); got != burst {
				t.Fatalf("allowed %d of %d concurrent requests, want exactly %d", got, workers*each, burst)
			}
		})
	}
}

func TestRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustNew(t, 5, time.Second) // one token per 200ms
		r := req("192.0.2.1:1")
		for i := range 5 {
			if d := lim.Allow(r); d.Outcome != addrlimit.Allowed || d.Remaining != 4-i {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		d := lim.Allow(r)
		if d.Outcome != addrlimit.Limited || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != time.Second {
			t.Fatalf("6th request: %+v, want limited, retry in 200ms, full in 1s", d)
		}
		time.Sleep(199 * time.Millisecond)
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited || d.RetryAfter != time.Millisecond {
			t.Fatalf("after 199ms: %+v", d)
		}
		time.Sleep(time.Millisecond)
		if d := lim.Allow(r); d.Outcome != addrlimit.Allowed || d.Remaining != 0 || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("after 200ms: %+v", d)
		}
		time.Sleep(time.Second)
		for i := range 5 {
			if d := lim.Allow(r); d.Outcome != addrlimit.Allowed {
				t.Fatalf("after a full refill, request %d: %+v", i, d)
			}
		}
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited {
			t.Fatalf("a full bucket holds no more than the burst: %+v", d)
		}
		// 300/min: 300 at once, then one more every 200 ms.
		lim = mustNew(t, 300, time.Minute)
		allowed := 0
		for range 400 {
			if lim.Allow(r).Outcome == addrlimit.Allowed {
				allowed++
			}
		}
		time.Sleep(time.Second)
		for range 10 {
			if lim.Allow(r).Outcome == addrlimit.Allowed {
				allowed++
			}
		}
		if allowed != 305 {
			t.Fatalf("300/min allowed %d, want 300 at once plus 5 in the next second", allowed)
		}
	})
}

func TestMemoryBoundUnderFlood(t *testing.T) {
	const maxKeys, flood = 1000, 1_000_000
	lim := mustNew(t, 5, time.Hour, addrlimit.WithMaxKeys(maxKeys))
	abuser := req("198.51.100.66:1")
	for range 5 {
		lim.Allow(abuser)
	}
	r := req("")
	limitedAbuser := 0
	for i := range flood {
		r.RemoteAddr = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + ":1"
		lim.Allow(r)
		if i%1000 == 0 {
			if lim.Allow(abuser).Outcome == addrlimit.Limited {
				limitedAbuser++
			}
			if n := lim.Stats().Keys; n > maxKeys {
				t.Fatalf("table holds %d keys after %d addresses, cap %d", n, i+1, maxKeys)
			}
		}
	}
	if limitedAbuser != flood/1000 {
		t.Fatalf("abuser limited on %d of %d requests during the flood", limitedAbuser, flood/1000)
	}
	s := lim.Stats()
	if s.Keys != maxKeys {
		t.Fatalf("table holds %d keys after the flood, want the cap %d", s.Keys, maxKeys)
	}
	if s.Evictions < flood-2*maxKeys {
		t.Fatalf("evictions = %d, want about %d", s.Evictions, flood-maxKeys)
	}
}

// A table full of empty buckets admits no newcomer by evicting one: the
// newcomers share the overflow bucket instead.
func TestFloodOfAbusersOverflows(t *testing.T) {
	lim := mustNew(t, 1, time.Hour, addrlimit.WithMaxKeys(4))
	for i := range 4 {
		r := req(fmt.Sprintf("192.0.2.%d:1", i))
		lim.Allow(r)
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited {
			t.Fatalf("abuser %d not limited", i)
		}
	}
	if d := lim.Allow(req("198.51.100.1:1")); d.Outcome != addrlimit.Allowed {
		t.Fatalf("first newcomer: %v", d.Outcome)
	}
	if d := lim.Allow(req("198.51.100.2:1")); d.Outcome != addrlimit.Limited {
		t.Fatalf("second newcomer shares the overflow bucket, got %v", d.Outcome)
	}
	for i := range 4 {
		if d := lim.Allow(req(fmt.Sprintf("192.0.2.%d:1", i))); d.Outcome != addrlimit.Limited {
			t.Fatalf("abuser %d was evicted and got a fresh bucket", i)
		}
	}
	if s := lim.Stats(); s.Keys != 4 || s.Evictions != 0 || s.Overflows != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tests := []struct {
			name   string
			opts   []addrlimit.Option
			limit  int
			per    time.Duration
			nth    int // which request to inspect
			code   int
			fields map[string]string // "" = must be absent
		}{
			{"draft, first request", nil, 300, time.Minute, 1, 200, map[string]string{
				"RateLimit-Policy": `"default";q=300;w=60`, "RateLimit": `"default";r=299;t=0`, "Retry-After": "", "Cache-Control": ""}},
			{"draft, last token", nil, 300, time.Minute, 300, 200, map[string]string{
				"RateLimit": `"default";r=0;t=1`}},
			{"draft, limited", nil, 300, time.Minute, 301, 429, map[string]string{
				"RateLimit-Policy": `"default";q=300;w=60`, "RateLimit": `"default";r=0;t=1`, "Retry-After": "1", "Cache-Control": "no-store",
				"Content-Type": "text/plain; charset=utf-8"}},
			{"Retry-After from the bucket, not the window", nil, 3, time.Minute, 4, 429, map[string]string{
				"RateLimit-Policy": `"default";q=3;w=60`, "RateLimit": `"default";r=0;t=20`, "Retry-After": "20"}},
			{"Retry-After rounds up", nil, 2, 3 * time.Second, 3, 429, map[string]string{"Retry-After": "2"}},
			{"burst changes q and w", []addrlimit.Option{addrlimit.WithBurst(10)}, 300, time.Minute, 1, 200, map[string]string{
				"RateLimit-Policy": `"default";q=10;w=2`, "RateLimit": `"default";r=9;t=0`}},
			{"large burst formats past the precomputed values", []addrlimit.Option{addrlimit.WithBurst(5000)}, 5000, time.Hour, 1, 200, map[string]string{
				"RateLimit": `"default";r=4999;t=0`}},
			{"x-ratelimit", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}, 3, time.Minute, 2, 200, map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40", "RateLimit": ""}},
			{"x-ratelimit limited", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderXRateLimit)}, 3, time.Minute, 4, 429, map[string]string{
				"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60", "Retry-After": "20"}},
			{"none", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}, 3, time.Minute, 1, 200, map[string]string{
				"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": ""}},
			{"none still sends Retry-After when limited", []addrlimit.Option{addrlimit.WithHeaders(addrlimit.HeaderNone)}, 3, time.Minute, 4, 429, map[string]string{
				"RateLimit": "", "Retry-After": "20", "Cache-Control": "no-store"}},
			{"dry run sets quota but never denies", []addrlimit.Option{addrlimit.WithDryRun()}, 3, time.Minute, 4, 200, map[string]string{
				"RateLimit": `"default";r=0;t=20`, "Retry-After": ""}},
		}
		for _, tc := range tests {
			lim := mustNew(t, tc.limit, tc.per, tc.opts...)
			h := lim.Handler(okHandler)
			var w *httptest.ResponseRecorder
			for range tc.nth {
				w = serve(h, req("[2001:db8::1]:1"))
			}
			if w.Code != tc.code {
				t.Errorf("%s: code %d, want %d", tc.name, w.Code, tc.code)
			}
			for f, want := range tc.fields {
				if got := w.Header().Get(f); got != want {
					t.Errorf("%s: %s = %q, want %q", tc.name, f, got, want)
				}
			}
			if w.Code == 429 && strings.Contains(w.Body.String(), "2001") {
				t.Errorf("%s: body echoes the address: %q", tc.name, w.Body.String())
			}
		}
	})
}

func TestDeniedBodyRevealsNothing(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	h := lim.Handler(okHandler)
	r := func() *http.Request {
		return req("203.0.113.9:4444", "Authorization", "Bearer leaked-token-value-123456", "X-Forwarded-For", "198.51.100.1", "Cookie", "sid=abc")
	}
	serve(h, r())
	w := serve(h, r())
	if w.Code != 429 {
		t.Fatalf("code %d", w.Code)
	}
	body := w.Body.String()
	for _, s := range []string{"203.0.113", "leaked", "198.51", "sid", "4444"} {
		if strings.Contains(body, s) || strings.Contains(fmt.Sprint(w.Header()), s) {
			t.Fatalf("response reveals %q: %q %v", s, body, w.Header())
		}
	}
}

func TestObserver(t *testing.T) {
	tok := mustToken(t, secret)
	type seen struct {
		path string
		d    addrlimit.Decision
	}
	var got []seen
	lim := mustNew(t, 1, time.Hour, addrlimit.WithExempt(tok.Match),
		addrlimit.WithObserver(func(r *http.Request, d addrlimit.Decision) { got = append(got, seen{r.URL.Path, d}) }),
		addrlimit.WithObserver(func(r *http.Request, d addrlimit.Decision) { got = append(got, seen{"second", d}) }))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret))
	serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-token-0123456789"))
	want := []addrlimit.Decision{
		{Outcome: addrlimit.Allowed, Key: "192.0.2.1", Limit: 1, Remaining: 0, RetryAfter: time.Hour, ResetAfter: time.Hour},
		{Outcome: addrlimit.Exempt},
		{Outcome: addrlimit.Limited, Key: "192.0.2.1", Limit: 1, Remaining: 0},
	}
	if len(got) != 2*len(want) {
		t.Fatalf("observers called %d times, want %d", len(got), 2*len(want))
	}
	for i, w := range want {
		d := got[2*i].d
		if got[2*i+1].path != "second" || got[2*i+1].d != d {
			t.Fatalf("observers out of order or told different decisions at %d", i)
		}
		// RetryAfter and ResetAfter depend on the clock; check them apart.
		if d.Outcome != w.Outcome || d.Key != w.Key || d.Limit != w.Limit || d.Remaining != w.Remaining {
			t.Errorf("decision %d = %+v, want %+v", i, d, w)
		}
		if w.Outcome != addrlimit.Exempt && (d.RetryAfter <= 0 || d.RetryAfter > time.Hour) {
			t.Errorf("decision %d RetryAfter = %v", i, d.RetryAfter)
		}
	}
	if s := lim.Stats(); s.CredentialedLimited != 1 || s.Limited != 1 || s.Allowed != 1 || s.Exempt != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDeniedHandler(t *testing.T) {
	var inHandler http.Header
	var dec addrlimit.Decision
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = w.Header().Clone()
		dec, _ = addrlimit.DecisionFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"error":"slow down"}`))
	})
	lim := mustNew(t, 1, time.Minute, addrlimit.WithDeniedHandler(deny))
	h := lim.Handler(okHandler)
	serve(h, req("192.0.2.1:1"))
	w := serve(h, req("192.0.2.1:1"))
	if w.Code != http.StatusTeapot || w.Body.String() != `{"error":"slow down"}` {
		t.Fatalf("denied handler not used: %d %q", w.Code, w.Body.String())
	}
	if inHandler.Get("Retry-After") != "60" || inHandler.Get("RateLimit") == "" || inHandler.Get("Cache-Control") != "no-store" {
		t.Fatalf("fields not set before the denied handler ran: %v", inHandler)
	}
	if dec.Outcome != addrlimit.Limited || dec.Key != "192.0.2.1" || dec.Limit != 1 {
		t.Fatalf("decision in context: %+v", dec)
	}
	if _, ok := addrlimit.DecisionFromContext(context.Background()); ok {
		t.Fatal("DecisionFromContext found a decision in an empty context")
	}
}

func TestDryRun(t *testing.T) {
	var limited int
	lim := mustNew(t, 2, time.Hour, addrlimit.WithDryRun(), addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) {
		if d.Outcome == addrlimit.Limited && d.DryRun && !d.Denied() {
			limited++
		}
	}))
	got := codes(lim.Handler(okHandler), 10, func() *http.Request { return req("192.0.2.1:1") })
	if count(got, 200) != 10 {
		t.Fatalf("dry run denied: %v", got)
	}
	if limited != 8 {
		t.Fatalf("observer saw %d dry-run limits, want 8", limited)
	}
	if s := lim.Stats(); s.Limited != 8 || s.Allowed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// failingStore fails every Take while down is set, and otherwise delegates.
type failingStore struct {
	down  atomic.Bool
	inner addrlimit.Store
	calls atomic.Int64
}

func (s *failingStore) Take(ctx context.Context, key string, p addrlimit.Policy) (addrlimit.Result, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return addrlimit.Result{}, errors.New("dial tcp 10.9.9.9:6379: connection refused")
	}
	return s.inner.Take(ctx, key, p)
}

func TestStoreFailure(t *testing.T) {
	tests := []struct {
		policy addrlimit.FailurePolicy
		codes  string
		quota  bool
	}{
		{addrlimit.FailLocal, "[200 200 429 429]", true},
		{addrlimit.FailOpen, "[200 200 200 200]", false},
		{addrlimit.FailClosed, "[503 503 503 503]", false},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			mem, _ := addrlimit.NewMemoryStore(100)
			st := &failingStore{inner: mem}
			st.down.Store(true)
			var errs int
			lim := mustNew(t, 2, time.Hour, addrlimit.WithStore(st), addrlimit.WithStoreFailure(tc.policy),
				addrlimit.WithObserver(func(_ *http.Request, d addrlimit.Decision) {
					if d.Err != nil && d.Degraded {
						errs++
					}
				}))
			h := lim.Handler(okHandler)
			var ws []*httptest.ResponseRecorder
			for range 4 {
				ws = append(ws, serve(h, req("192.0.2.1:1")))
			}
			var got []int
			for _, w := range ws {
				got = append(got, w.Code)
				if strings.Contains(w.Body.String(), "refused") || strings.Contains(w.Body.String(), "10.9.9.9") {
					t.Fatalf("store error reached the client: %q", w.Body.String())
				}
				if hasQuota := w.Header().Get("RateLimit") != ""; hasQuota != tc.quota {
					t.Fatalf("quota fields present = %v, want %v", hasQuota, tc.quota)
				}
				if w.Code == 503 && (w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store") {
					t.Fatalf("503 without Retry-After: %v", w.Header())
				}
			}
			if fmt.Sprint(got) != tc.codes {
				t.Fatalf("codes %v, want %s", got, tc.codes)
			}
			if errs != 4 || lim.Stats().StoreErrors != 4 {
				t.Fatalf("observer saw %d store errors, stats %d; want 4", errs, lim.Stats().StoreErrors)
			}
			// The store recovers: its own budget applies again at once.
			st.down.Store(false)
			got = codes(h, 3, func() *http.Request { return req("192.0.2.1:1") })
			if fmt.Sprint(got) != "[200 200 429]" {
				t.Fatalf("after recovery: %v", got)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	valid := addrlimit.WithBurst(1)
	other, _ := addrlimit.NewMemoryStore(10)
	if _, err := other.Take(context.Background(), "k", addrlimit.Policy{Burst: 7, Interval: time.Second}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		limit   int
		per     time.Duration
		opts    []addrlimit.Option
		wantErr string
	}{
		{"zero limit", 0, time.Minute, nil, "limit must be at least 1"},
		{"negative limit", -5, time.Minute, nil, "limit must be at least 1"},
		{"zero period", 10, 0, nil, "period must be positive"},
		{"negative period", 10, -time.Second, nil, "period must be positive"},
		{"sub-nanosecond interval", 1000, time.Nanosecond, nil, "more than one request per nanosecond"},
		{"zero burst", 10, time.Minute, []addrlimit.Option{addrlimit.WithBurst(0)}, "burst must be at least 1"},
		{"overflowing burst", 10, time.Hour, []addrlimit.Option{addrlimit.WithBurst(1 << 40)}, "overflows"},
		{"zero max keys", 10, time.Minute, []addrlimit.Option{addrlimit.WithMaxKeys(0)}, "max keys must be at least 1"},
		{"nil key func", 10, time.Minute, []addrlimit.Option{addrlimit.WithKeyFunc(nil)}, "nil KeyFunc"},
		{"nil exempt", 10, time.Minute, []addrlimit.Option{addrlimit.WithExempt(nil)}, "WithExempt given a nil"},
		{"nil denied handler", 10, time.Minute, []addrlimit.Option{addrlimit.WithDeniedHandler(nil)}, "nil handler"},
		{"nil observer", 10, time.Minute, []addrlimit.Option{addrlimit.WithObserver(nil)}, "WithObserver given a nil"},
		{"nil store", 10, time.Minute, []addrlimit.Option{addrlimit.WithStore(nil)}, "nil Store"},
		{"nil option", 10, time.Minute, []addrlimit.Option{valid, nil}, "option 2 is nil"},
		{"unknown header style", 10, time.Minute, []addrlimit.Option{addrlimit.WithHeaders(9)}, "unknown header style"},
		{"unknown failure policy", 10, time.Minute, []addrlimit.Option{addrlimit.WithStoreFailure(9)}, "unknown failure policy"},
		{"memory store bound to another policy", 10, time.Minute, []addrlimit.Option{addrlimit.WithStore(other)}, "different policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := addrlimit.New(tc.limit, tc.per, tc.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			if !strings.HasPrefix(err.Error(), "addrlimit: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want prefix \"addrlimit: \" and %q", err, tc.wantErr)
			}
		})
	}
	if _, err := addrlimit.NewMemoryStore(0); err == nil {
		t.Fatal("NewMemoryStore(0) succeeded")
	}
}

func TestNewInternalTokenErrors(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		wantErr string
	}{
		{"no secret", nil, "at least one secret"},
		{"empty", []string{""}, "secret 1 of 1 is empty"},
		{"short", []string{"Zq8xK2mW9pL4vB7"}, "15 bytes, shorter than the minimum of 16"},
		{"too long", []string{strings.Repeat("a", 513)}, "longer than the maximum"},
		{"space inside", []string{"abcdefgh ijklmnopq"}, "outside RFC 6750 b64token"},
		{"trailing newline", []string{"abcdefghijklmnopq\n"}, "outside RFC 6750 b64token"},
		{"padding in the middle", []string{"abcdefgh=ijklmnopq"}, "outside RFC 6750 b64token"},
		{"only padding", []string{"================"}, "outside RFC 6750 b64token"},
		{"second of two is bad", []string{secret, "bad secret with spaces"}, "secret 2 of 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := addrlimit.NewInternalToken(tc.secrets...)
			if err == nil || tok != nil {
				t.Fatalf("NewInternalToken = %v, %v; want an error", tok, err)
			}
			if !strings.HasPrefix(err.Error(), "addrlimit: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want %q", err, tc.wantErr)
			}
			for _, s := range tc.secrets {
				if len(s) >= 8 && strings.Contains(err.Error(), s[:8]) {
					t.Fatalf("error %q echoes a secret", err)
				}
			}
		})
	}
}

func TestMatch(t *testing.T) {
	old, cur := "old-secret-aaaaaaaaaaaaaaaa", "new-secret-bbbbbbbbbbbbbbbb+/=="
	tok := mustToken(t, old, cur)
	tests := []struct {
		name   string
		fields []string
		want   bool
	}{
		{"current secret", []string{"Authorization", "Bearer " + cur}, true},
		{"old secret during rotation", []string{"Authorization", "Bearer " + old}, true},
		{"scheme in any case", []string{"Authorization", "bEaReR " + cur}, true},
		{"several spaces after the scheme", []string{"Authorization", "Bearer   " + cur}, true},
		{"no header", nil, false},
		{"two headers", []string{"Authorization", "Bearer " + cur, "Authorization", "Bearer " + cur}, false},
		{"two values in one line", []string{"Authorization", "Bearer " + cur + ", Bearer " + cur}, false},
		{"tab after scheme", []string{"Authorization", "Bearer\t" + cur}, false},
		{"no space", []string{"Authorization", "Bearer" + cur}, false},
		{"other scheme", []string{"Authorization", "Token " + cur}, false},
		{"Bearerx scheme", []string{"Authorization", "Bearerx " + cur}, false},
		{"case of the token matters", []string{"Authorization", "Bearer " + strings.ToUpper(cur)}, false},
		{"padding stripped", []string{"Authorization", "Bearer " + strings.TrimRight(cur, "=")}, false},
		{"concatenated secrets", []string{"Authorization", "Bearer " + old + cur}, false},
		{"too long", []string{"Authorization", "Bearer " + strings.Repeat("a", 10000)}, false},
		{"lowercase header name is canonicalised by net/http", []string{"authorization", "Bearer " + cur}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.Match(req("192.0.2.1:1", tc.fields...)); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequire(t *testing.T) {
	tok := mustToken(t, secret)
	h := tok.Require(okHandler)
	if w := serve(h, req("192.0.2.1:1", "Authorization", "Bearer "+secret)); w.Code != 200 || w.Body.String() != "ok" {
		t.Fatalf("valid token: %d %q", w.Code, w.Body.String())
	}
	w := serve(h, req("192.0.2.1:1", "Authorization", "Bearer wrong-but-well-formed-token"))
	if w.Code != 401 || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("wrong token: %d %v", w.Code, w.Header())
	}
	if strings.Contains(w.Body.String(), "wrong") {
		t.Fatalf("401 echoes the token: %q", w.Body.String())
	}
}

func TestNilHandlersPanicAtWiringTime(t *testing.T) {
	for name, f := range map[string]func(){
		"Handler": func() { mustNew(t, 1, time.Second).Handler(nil) },
		"Require": func() { mustToken(t, secret).Require(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s(nil) did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[addrlimit.Outcome]string{addrlimit.Allowed: "allowed", addrlimit.Limited: "limited", addrlimit.Exempt: "exempt", 0: "Outcome(0)"} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", o, got, want)
		}
	}
}

func FuzzRemoteAddrKey(f *testing.F) {
	for _, s := range []string{"192.0.2.1:80", "[2001:db8::1]:443", "[fe80::1%eth0]:1", "[::ffff:1.2.3.4]:5", "1.2.3.4", "@", "", "[::1]:", "::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ra string) {
		r := &http.Request{RemoteAddr: ra, Header: http.Header{}}
		k1, err1 := addrlimit.RemoteAddrKey(r)
		k2, err2 := addrlimit.RemoteAddrKey(r)
		if k1 != k2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q %v / %q %v", k1, err1, k2, err2)
		}
		// Agreement with the reference parsers of net/netip.
		ref, refErr := netip.ParseAddrPort(ra)
		refAddr := ref.Addr()
		if refErr != nil {
			refAddr, refErr = netip.ParseAddr(ra)
		}
		if (err1 == nil) != (refErr == nil) {
			t.Fatalf("RemoteAddrKey(%q) error %v, net/netip error %v", ra, err1, refErr)
		}
		if err1 != nil {
			if k1 != "" {
				t.Fatalf("key %q with error %v", k1, err1)
			}
			return
		}
		if want := addrlimit.AddrKey(refAddr); k1 != want {
			t.Fatalf("RemoteAddrKey(%q) = %q, net/netip gives %q", ra, k1, want)
		}
		// A key is a normalised address or /64, and normalising it again changes nothing.
		var a netip.Addr
		if p, err := netip.ParsePrefix(k1); err == nil {
			if p.Bits() != 64 || p.Masked() != p {
				t.Fatalf("key %q is not a masked /64", k1)
			}
			a = p.Addr()
		} else if a, err = netip.ParseAddr(k1); err != nil || !a.Is4() {
			t.Fatalf("key %q for %q is neither an IPv4 address nor a /64", k1, ra)
		}
		if again := addrlimit.AddrKey(a); again != k1 {
			t.Fatalf("AddrKey(%v) = %q, not the fixed point %q", a, again, k1)
		}
	})
}

func FuzzMatch(f *testing.F) {
	tok := mustToken(f, secret)
	for _, s := range []string{"Bearer " + secret, "bearer " + secret, "Bearer  " + secret, "Basic " + secret, "Bearer " + secret + "=", "", "Bearer"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		want := len(v) > 7 && strings.EqualFold(v[:7], "bearer ") && strings.TrimLeft(v[7:], " ") == secret
		if got := tok.Match(r); got != want {
			t.Fatalf("Match(%q) = %v, want %v", v, got, want)
		}
	})
}
