package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// liveSecret is the internal token of the live server in these tests.
const liveSecret = "replay-live-test-internal-token-0123456789"

// The flags that describe liveOptions to the replay.
var liveFlags = []string{
	"-limit", "5", "-per", "1m", "-burst", "4",
	"-policy", "login=2/1m@/login",
	"-cost", "/batch=3",
	"-proxy-header", "X-Forwarded-For", "-trusted", "127.0.0.1/32",
	"-format", "json", "-json-field", "time=ts", "-json-field", "remote=remote", "-json-field", "fwd=xff",
	"-json-field", "path=uri", "-json-field", "ua=ua", "-identity-field", "svc",
}

// liveOptions is the middleware's configuration as a user writes it in Go.
func liveOptions(t *testing.T, now func() time.Time, tok *addrlimit.InternalToken) []addrlimit.Option {
	t.Helper()
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	return []addrlimit.Option{
		addrlimit.WithClock(now),
		addrlimit.WithBurst(4),
		addrlimit.WithKeyFunc(proxies.Key),
		addrlimit.WithInternalToken(tok),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "login", Limits: []addrlimit.Limit{{Burst: 2, Interval: 30 * time.Second}}}),
		addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
			if strings.HasPrefix(r.URL.Path, "/login") {
				return "login", "", nil
			}
			return "", "", nil
		}),
		addrlimit.WithCost(func(r *http.Request) int {
			if strings.HasPrefix(r.URL.Path, "/batch") {
				return 3
			}
			return 1
		}),
	}
}

// accessLog is the server's access log: one JSON line per request, written
// around the limiter as a proxy or a logging middleware would, with the
// identity only when the token was verified.
type accessLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *accessLog) wrap(now func() time.Time, tok *addrlimit.InternalToken, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svc := "-"
		if tok.Match(r) {
			svc = "edge"
		}
		line, _ := json.Marshal(map[string]any{
			"ts": now().UnixNano(), "remote": r.RemoteAddr, "xff": strings.Join(r.Header.Values("X-Forwarded-For"), ", "),
			"method": r.Method, "uri": r.URL.RequestURI(), "ua": r.UserAgent(), "svc": svc,
		})
		l.mu.Lock()
		l.buf.Write(append(line, '\n'))
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// TestReplayEqualsLive: requests sent through a real server (net/http on
// loopback, the middleware with the same clock) and the server's access log
// replayed give the same decision for every request: outcome, key, policy,
// cost, remaining tokens and retry time. The traffic covers what the keys
// depend on: trusted proxies (with forged X-Forwarded-For from trusted and
// untrusted peers), IPv6 grouped by /64, NAT64 and IPv4-mapped addresses
// keyed by their IPv4 address, a second policy, a cost, the internal token
// (valid and wrong), and irregular gaps in time that refill buckets.
func TestReplayEqualsLive(t *testing.T) {
	var mu sync.Mutex
	virtual := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return virtual }
	tok, err := addrlimit.NewInternalToken(liveSecret)
	if err != nil {
		t.Fatal(err)
	}
	var live []addrlimit.Decision
	opts := append(liveOptions(t, now, tok), addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		live = append(live, d) // requests are sent one at a time
	}))
	lim, err := addrlimit.New(5, time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var log accessLog
	srv := httptest.NewServer(log.wrap(now, tok, lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))))
	defer srv.Close()

	fromTrusted := http.Client{Transport: &http.Transport{}}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}} // an untrusted peer
	fromOther := http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	clients := []string{"192.0.2.1", "192.0.2.2", "2001:db8:1:2::1", "2001:db8:1:2::ffff", "2001:db8:1:3::1",
		"64:ff9b::c000:205", "192.0.2.5", "::ffff:192.0.2.6", "192.0.2.6"}
	paths := []string{"/", "/a", "/login", "/login/x", "/batch/1", "/v1/sites?q=1"}
	rng := rand.New(rand.NewPCG(27, 5))
	const n = 600
	statuses := map[int]int{}
	for range n {
		mu.Lock()
		virtual = virtual.Add(time.Duration(rng.IntN(4000)) * time.Millisecond / time.Duration(1+rng.IntN(8)))
		mu.Unlock()
		req, err := http.NewRequest("GET", srv.URL+paths[rng.IntN(len(paths))], nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", fmt.Sprintf("client-%d", rng.IntN(3)))
		c := &fromTrusted
		switch k := rng.IntN(10); {
		case k == 0: // an untrusted peer forging the header
			c = &fromOther
			req.Header.Set("X-Forwarded-For", clients[rng.IntN(len(clients))])
		case k == 1: // a client's forged entry, then what the proxy appended
			req.Header.Set("X-Forwarded-For", "198.51.100.9, "+clients[rng.IntN(len(clients))])
		case k == 2: // your own service, with the token
			req.Header.Set("X-Forwarded-For", "192.0.2.1")
			req.Header.Set("Authorization", "Bearer "+liveSecret)
		case k == 3: // a wrong token
			req.Header.Set("X-Forwarded-For", "192.0.2.1")
			req.Header.Set("Authorization", "Bearer wrong-token-0000000000000000")
		default:
			req.Header.Set("X-Forwarded-For", clients[rng.IntN(len(clients))])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if len(live) != n {
		t.Fatalf("%d live decisions, want %d", len(live), n)
	}
	// The traffic is worth comparing: each kind of decision occurs.
	kinds := map[string]int{}
	for _, d := range live {
		kinds[d.Outcome.String()+"/"+d.Policy]++
		if d.Cost == 3 {
			kinds["cost 3"]++
		}
		kinds["key "+d.Key]++
	}
	for _, k := range []string{"allowed/default", "limited/default", "allowed/login", "limited/login", "exempt/", "cost 3",
		"key 2001:db8:1:2::/64", "key 192.0.2.5", "key 192.0.2.6", "key 127.0.0.2"} {
		if kinds[k] == 0 {
			t.Errorf("no live decision of kind %q: the traffic does not cover it (%v)", k, kinds)
		}
	}

	_, p, e, err := setup(liveFlags, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(log.buf.Bytes()))
	var rec record
	i := 0
	for ; sc.Scan(); i++ {
		if !p.parse(sc.Bytes(), &rec) {
			t.Fatalf("line %d does not parse: %s", i+1, sc.Text())
		}
		got, want := e.decide(&rec), live[i]
		got.Err, want.Err = nil, nil // compared by presence below
		// An access log holds no credentials, only the identity of an
		// accepted token: a wrong one presented live is not replayed.
		got.Credentialed, want.Credentialed = false, false
		want.Route = "" // the replay drops it (transient)
		if fmt.Sprint(public(got)) != fmt.Sprint(public(want)) || got.Limit() != want.Limit() {
			t.Fatalf("request %d (%s): replayed %+v, live %+v", i+1, sc.Text(), got, want)
		}
	}
	if i != n {
		t.Fatalf("%d log lines, want %d", i, n)
	}
	ls, rs := lim.Stats(), e.lim.Stats()
	if ls.Allowed != rs.Allowed || ls.Limited != rs.Limited || ls.Exempt != rs.Exempt || ls.KeyErrors != rs.KeyErrors {
		t.Errorf("Stats: live %+v, replayed %+v", ls, rs)
	}
	t.Logf("%d requests: %v; live Stats allowed=%d limited=%d exempt=%d key errors=%d", n, statuses, ls.Allowed, ls.Limited, ls.Exempt, ls.KeyErrors)
}

// public returns d's exported fields only: decisions of two Limiters differ
// in the policy they point to.
func public(d addrlimit.Decision) addrlimit.Decision {
	var out addrlimit.Decision
	src, dst := reflect.ValueOf(d), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		if src.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}
