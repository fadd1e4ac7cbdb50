package addrlimit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	lbRange  = netip.MustParsePrefix("10.0.0.0/8")
	cdnRange = netip.MustParsePrefix("2001:db8:cd::/48")
)

func mustProxies(t testing.TB, header string, trusted ...netip.Prefix) *addrlimit.TrustedProxies {
	t.Helper()
	p, err := addrlimit.NewTrustedProxies(header, trusted...)
	require.NoError(t, err)
	return p
}

func TestTrustedProxies(t *testing.T) {
	tests := []struct {
		name   string
		header string
		peer   string
		lines  []string
		want   string // key
		warn   bool
	}{
		// Rule 1: an untrusted peer is the client.
		{"untrusted peer, no header", "X-Forwarded-For", "203.0.113.9:1", nil, "203.0.113.9", false},
		{"untrusted peer, header ignored", "X-Forwarded-For", "203.0.113.9:1", []string{"198.51.100.1"}, "203.0.113.9", false},
		// Rule 2: walk from the right, skipping trusted hops.
		{"one proxy", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9"}, "203.0.113.9", false},
		{"client-written entries on the left are ignored", "X-Forwarded-For", "10.0.0.1:1", []string{"1.1.1.1, 2.2.2.2, 203.0.113.9"}, "203.0.113.9", false},
		{"trusted hops skipped", "X-Forwarded-For", "10.0.0.1:1", []string{"1.1.1.1, 203.0.113.9, 10.0.0.3, 10.0.0.2"}, "203.0.113.9", false},
		{"every element trusted: leftmost", "X-Forwarded-For", "10.0.0.1:1", []string{"10.9.9.9, 10.0.0.2"}, "10.9.9.9", false},
		{"spaces and tabs", "X-Forwarded-For", "10.0.0.1:1", []string{" 1.1.1.1 ,\t203.0.113.9\t"}, "203.0.113.9", false},
		{"IPv6 client grouped by /64", "X-Forwarded-For", "10.0.0.1:1", []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64", false},
		{"IPv6 trusted proxy range", "X-Forwarded-For", "[2001:db8:cd::5]:1", []string{"203.0.113.9, 2001:db8:cd::7"}, "203.0.113.9", false},
		{"IPv4 client behind NAT64 keyed by its IPv4", "X-Forwarded-For", "10.0.0.1:1", []string{"64:ff9b::203.0.113.9"}, "203.0.113.9", false},
		{"IPv4 client behind NAT64 in Forwarded", "Forwarded", "10.0.0.1:1", []string{`for="[64:ff9b::cb00:7109]:4711"`}, "203.0.113.9", false},
		// Rule 3: unparsable elements never lead further left.
		{"garbage rightmost: the peer", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9, garbage"}, "10.0.0.1", true},
		{"garbage behind a trusted hop: that hop", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9, garbage, 10.0.0.2"}, "10.0.0.2", true},
		{"unknown", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9, unknown"}, "10.0.0.1", true},
		{"empty element", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9, , 10.0.0.2"}, "10.0.0.2", true},
		{"trailing comma", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9,"}, "10.0.0.1", true},
		{"empty header", "X-Forwarded-For", "10.0.0.1:1", []string{""}, "10.0.0.1", true},
		{"trusted peer sent no header", "X-Forwarded-For", "10.0.0.1:1", nil, "10.0.0.1", true},
		{"hostname", "X-Forwarded-For", "10.0.0.1:1", []string{"evil.example"}, "10.0.0.1", true},
		{"CIDR is not an address", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.0/24"}, "10.0.0.1", true},
		// Ports and brackets, which some load balancers add.
		{"IPv4 with port", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9:4711"}, "203.0.113.9", false},
		{"bracketed IPv6 with port", "X-Forwarded-For", "10.0.0.1:1", []string{"[2001:db8::17]:4711"}, "2001:db8::/64", false},
		{"bracketed IPv6", "X-Forwarded-For", "10.0.0.1:1", []string{"[2001:db8::17]"}, "2001:db8::/64", false},
		{"bad port", "X-Forwarded-For", "10.0.0.1:1", []string{"203.0.113.9:99999"}, "10.0.0.1", true},
		{"IPv6 port without brackets", "X-Forwarded-For", "10.0.0.1:1", []string{"2001:db8::17:4711"}, "2001:db8::/64", false},
		// Single-address headers.
		{"X-Real-IP", "X-Real-IP", "10.0.0.1:1", []string{"203.0.113.9"}, "203.0.113.9", false},
		{"CF-Connecting-IP, lower-case name", "cf-connecting-ip", "10.0.0.1:1", []string{"2001:db8:5:6::1"}, "2001:db8:5:6::/64", false},
		{"single-address header with client-injected line first", "True-Client-IP", "10.0.0.1:1", []string{"1.1.1.1", "203.0.113.9"}, "203.0.113.9", false},
		// Forwarded (RFC 7239).
		{"Forwarded", "Forwarded", "10.0.0.1:1", []string{"for=203.0.113.9"}, "203.0.113.9", false},
		{"Forwarded with other parameters", "Forwarded", "10.0.0.1:1", []string{"for=1.1.1.1;proto=https, by=10.0.0.1;for=203.0.113.9;host=example.com;proto=https"}, "203.0.113.9", false},
		{"Forwarded name case-insensitive", "forwarded", "10.0.0.1:1", []string{"FoR=203.0.113.9"}, "203.0.113.9", false},
		{"Forwarded quoted IPv6 with port", "Forwarded", "10.0.0.1:1", []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64", false},
		{"Forwarded quoted IPv4 with port", "Forwarded", "10.0.0.1:1", []string{`for="203.0.113.9:4711"`}, "203.0.113.9", false},
		{"Forwarded obfuscated port", "Forwarded", "10.0.0.1:1", []string{`for="203.0.113.9:_abc"`}, "203.0.113.9", false},
		{"Forwarded trusted hops", "Forwarded", "10.0.0.1:1", []string{`for=203.0.113.9, for=10.0.0.3;by=10.0.0.1`}, "203.0.113.9", false},
		{"Forwarded unknown", "Forwarded", "10.0.0.1:1", []string{"for=203.0.113.9, for=unknown"}, "10.0.0.1", true},
		{"Forwarded obfuscated node", "Forwarded", "10.0.0.1:1", []string{"for=203.0.113.9, for=_hidden, for=10.0.0.2"}, "10.0.0.2", true},
		{"Forwarded element without for=", "Forwarded", "10.0.0.1:1", []string{"for=203.0.113.9, proto=https"}, "10.0.0.1", true},
		{"Forwarded two for= in one element", "Forwarded", "10.0.0.1:1", []string{"for=1.1.1.1;for=203.0.113.9"}, "10.0.0.1", true},
		{"Forwarded unbracketed IPv6", "Forwarded", "10.0.0.1:1", []string{"for=2001:db8::1"}, "10.0.0.1", true},
		{"Forwarded comma inside quotes", "Forwarded", "10.0.0.1:1", []string{`for=1.1.1.1;x="a,b", for=203.0.113.9`}, "203.0.113.9", false},
		{"Forwarded client unbalances quotes on the left", "Forwarded", "10.0.0.1:1", []string{`for="1.1.1.1, for=203.0.113.9`}, "203.0.113.9", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustProxies(t, tc.header, lbRange, cdnRange)
			r := req(tc.peer)
			for _, l := range tc.lines {
				r.Header.Add(tc.header, l)
			}
			key, err := p.Key(r)
			assert.Equal(t, tc.want, key, "Key (warning %v)", err)
			if !tc.warn {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "want a warning")
			for _, l := range tc.lines {
				if l != "" {
					assert.NotContains(t, err.Error(), l, "the warning quotes the header")
				}
			}
		})
	}
}

func TestNewTrustedProxiesErrors(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		trusted []netip.Prefix
		wantErr string
	}{
		{"empty header", "", []netip.Prefix{lbRange}, "header name is empty"},
		{"invalid header name", "X Forwarded For", []netip.Prefix{lbRange}, "not a valid field name"},
		{"no ranges", "X-Forwarded-For", nil, "no trusted proxy ranges"},
		{"zero prefix", "X-Forwarded-For", []netip.Prefix{{}}, "range 1 of 1 is not a valid prefix"},
		{"trust everything v4", "X-Forwarded-For", []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, "trusts every address"},
		{"trust everything v6", "X-Forwarded-For", []netip.Prefix{lbRange, netip.MustParsePrefix("::/0")}, "trusts every address"},
		{"mapped /96 is everything", "X-Forwarded-For", []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/96")}, "trusts every address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := addrlimit.NewTrustedProxies(tc.header, tc.trusted...)
			requirePackageError(t, err, tc.wantErr)
		})
	}
}

// Regression tests named after the advisories whose holes they keep shut.

// gin CVE-2020-28483: the leftmost X-Forwarded-For value was the client IP.
func TestAdvisory_CVE_2020_28483_LeftmostXFF(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	r := req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.9")
	k, _ := p.Key(r)
	assert.Equal(t, "203.0.113.9", k, "the client-written leftmost value was used")
}

// chi RealIP (GHSA-9g5q-2w5x-hmxf) and httprate KeyByRealIP: headers were
// believed from any peer.
func TestAdvisory_GHSA_9g5q_2w5x_hmxf_HeaderFromUntrustedPeer(t *testing.T) {
	for _, h := range []string{"X-Forwarded-For", "X-Real-IP", "Forwarded", "True-Client-IP"} {
		p := mustProxies(t, h, lbRange)
		v := "6.6.6.6"
		if h == "Forwarded" {
			v = "for=6.6.6.6"
		}
		k, err := p.Key(req("203.0.113.9:1", h, v))
		require.NoError(t, err, "%s from an untrusted peer", h)
		require.Equal(t, "203.0.113.9", k, "%s from an untrusted peer", h)
	}
}

// tollbooth (2022): several headers were tried in turn, so a client could set
// whichever one the proxy did not overwrite.
func TestAdvisory_Tollbooth2022_OnlyTheConfiguredHeader(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	r := req("10.0.0.1:1", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "6.6.6.6", "True-Client-IP", "6.6.6.7", "Forwarded", "for=6.6.6.8")
	k, _ := p.Key(r)
	assert.Equal(t, "203.0.113.9", k, "the key came from a header that was not configured")
}

// An IPv4-mapped IPv6 peer or element is the same trusted proxy, not a client.
func TestAdvisory_IPv4MappedAliasOfTrustedProxy(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	r := req("[::ffff:10.0.0.1]:1", "X-Forwarded-For", "203.0.113.9, ::ffff:10.0.0.2")
	k, err := p.Key(r)
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", k)
	// A mapped trusted range matches plain IPv4 too.
	p = mustProxies(t, "X-Forwarded-For", netip.MustParsePrefix("::ffff:10.0.0.0/104"))
	k, err = p.Key(req("10.0.0.1:1", "X-Forwarded-For", "203.0.113.9"))
	require.NoError(t, err, "mapped range")
	assert.Equal(t, "203.0.113.9", k, "mapped range")
}

// A zone must not turn a trusted proxy into an untrusted "client".
func TestAdvisory_ZoneAliasOfTrustedProxy(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", netip.MustParsePrefix("fe80::/10"))
	r := req("[fe80::1%eth0]:1", "X-Forwarded-For", "203.0.113.9, fe80::2%eth1")
	k, err := p.Key(r)
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", k)
}

// RFC 9110 §5.3: several lines are one comma-joined list; the proxy's line
// comes last.
func TestAdvisory_SeveralHeaderLines(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	r := req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.9, 10.0.0.2")
	k, _ := p.Key(r)
	assert.Equal(t, "203.0.113.9", k)
	r = req("10.0.0.1:1", "X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "10.0.0.3, 10.0.0.2")
	k, _ = p.Key(r)
	assert.Equal(t, "203.0.113.9", k, "walk across lines")
}

func TestAdvisory_PortsAndBrackets(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	for _, v := range []string{"203.0.113.9:1", "203.0.113.9:65535", "[::ffff:203.0.113.9]:80", "::ffff:203.0.113.9"} {
		k, err := p.Key(req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, "+v+", 10.0.0.2:443"))
		require.NoError(t, err, v)
		require.Equal(t, "203.0.113.9", k, v)
	}
}

func TestAdvisory_5000ElementHeader(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	spoof := strings.Repeat("6.6.6.6, ", 5000)
	k, err := p.Key(req("10.0.0.1:1", "X-Forwarded-For", spoof+"203.0.113.9"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", k)
	// All trusted: the walk stops after a bounded number of hops.
	chain := strings.Repeat("10.0.0.9, ", 5000) + "10.0.0.2"
	k, err = p.Key(req("10.0.0.1:1", "X-Forwarded-For", chain))
	assert.Equal(t, "10.0.0.9", k, "5000 trusted hops: want the last hop walked")
	assert.Error(t, err, "5000 trusted hops: want a warning")
}

// End to end: behind a trusted proxy, a client rotating the leftmost
// X-Forwarded-For value still gets exactly its quota.
func TestTrustedProxyEndToEnd(t *testing.T) {
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", lbRange)
	require.NoError(t, err)
	var warnings int
	lim := mustNew(t, 5, time.Hour, addrlimit.WithKeyFunc(proxies.Key), addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		if d.Err != nil {
			warnings++
		}
	}))
	h := lim.Handler(okHandler)
	got := codes(h, 50, func() *http.Request {
		return req("10.0.0.1:1", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d, 203.0.113.9", time.Now().Nanosecond()%250))
	})
	require.Equal(t, 5, count(got, 200), "times the rotating client was allowed")
	// Another client behind the same proxy has its own budget.
	require.Equal(t, 200, serve(h, req("10.0.0.1:1", "X-Forwarded-For", "203.0.113.10")).Code, "second client")
	// A misconfigured header is reported and charged to the proxy, not skipped.
	require.Equal(t, 200, serve(h, req("10.0.0.1:1", "X-Forwarded-For", "unknown")).Code, "misconfigured header")
	require.Equal(t, 1, warnings, "misconfigured header: warnings")
	d := lim.Allow(req("10.0.0.1:1", "X-Forwarded-For", "unknown"))
	assert.Equal(t, "10.0.0.1", d.Key, "decision %+v", d)
	assert.ErrorContains(t, d.Err, "X-Forwarded-For", "decision %+v", d)
	assert.Equal(t, uint64(2), lim.Stats().KeyErrors, "KeyErrors")
}

func TestClientAddr(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	a, err := p.ClientAddr(req("10.0.0.1:1", "X-Forwarded-For", "2001:db8:1:2::99"))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("2001:db8:1:2::99"), a, "want the full address, not the /64")
	_, err = p.ClientAddr(req("not-an-ip"))
	assert.Error(t, err, "unparsable RemoteAddr gave no error")
	k, err := p.Key(req("@"))
	assert.Empty(t, k, "Key of a Unix-socket peer")
	assert.Error(t, err, "Key of a Unix-socket peer")
}

func fuzzResolver(f *testing.F, header, appended string, seeds ...string) {
	p := mustProxies(f, header, lbRange, cdnRange)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, left string) {
		// Whatever the client writes on the left, the proxy's element decides.
		r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{}}
		r.Header[header] = []string{left + ", " + appended}
		if k, err := p.Key(r); k != "203.0.113.9" || err != nil {
			t.Fatalf("client-written %q changed the key to %q (%v)", left, k, err)
		}
		// Any header at all: never a panic, always a valid normalised key.
		r.Header[header] = []string{left}
		k, err := p.Key(r)
		base, group := strings.CutSuffix(k, "/64")
		a, perr := netip.ParseAddr(base)
		// A /64 key is the masked, canonical base of its /64 (which may lie
		// in 64:ff9b::/96: the key of a whole /64 of a non-NAT64 address,
		// not the address itself); any other key is AddrKey's form.
		normal := perr == nil && addrlimit.AddrKey(a) == k
		if group {
			normal = perr == nil && a.Is6() && !a.Is4In6() && a.Zone() == "" &&
				netip.PrefixFrom(a, 64).Masked().Addr() == a && a.String() == base
		}
		if !normal {
			t.Fatalf("key %q (%v) for %q is not a normalised address key", k, err, left)
		}
		if err != nil && k != "10.0.0.1" && !lbRange.Contains(a) {
			t.Fatalf("warning %v but key %q is not a trusted hop", err, k)
		}
	})
}

func FuzzXForwardedFor(f *testing.F) {
	fuzzResolver(f, "X-Forwarded-For", "203.0.113.9", "1.2.3.4", "10.0.0.2, garbage", "[::1]:80, unknown", ",,,", "2001:db8::1", "64:ff9b::a00:2, 64:ff9b::c000:201")
}

func FuzzForwarded(f *testing.F) {
	fuzzResolver(f, "Forwarded", "for=203.0.113.9;proto=https", `for="[2001:db8::1]:80"`, `for="`, `for=1.2.3.4;by="a,b"`, "for=unknown", `"\"`)
}

func BenchmarkTrustedProxiesKey(b *testing.B) {
	p := mustProxies(b, "X-Forwarded-For", lbRange)
	r := req("10.0.0.1:1", "X-Forwarded-For", "198.51.100.7, 203.0.113.9, 10.0.0.3, 10.0.0.2")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Key(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnixSocketPeer: nginx on the same machine proxies to the API over a
// Unix socket. Without WithUnixSocket every client shares UnkeyedKey; with
// it, each client has its own bucket, and a missing header is still never a
// bypass.
func TestUnixSocketPeer(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	for _, tc := range []struct {
		name       string
		trustUnix  bool
		wantClient []int // codes of client B after client A spent its budget
	}{
		{"not trusted: one shared bucket", false, []int{429, 429}},
		{"trusted: a bucket per client", true, []int{200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := mustProxies(t, "X-Forwarded-For", loopback)
			if tc.trustUnix {
				tp = tp.WithUnixSocket()
			}
			var keys []string
			lim := mustNew(t, 2, time.Hour, addrlimit.WithKeyFunc(tp.Key),
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { keys = append(keys, d.Key) }))
			sock := filepath.Join(t.TempDir(), "api.sock")
			ln, err := net.Listen("unix", sock)
			require.NoError(t, err)
			srv := &http.Server{Handler: lim.Handler(okHandler)}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}
			get := func(xff string) int {
				r, err := http.NewRequest("GET", "http://api/", nil)
				require.NoError(t, err)
				if xff != "" {
					r.Header.Set("X-Forwarded-For", xff)
				}
				resp, err := client.Do(r)
				require.NoError(t, err)
				resp.Body.Close()
				return resp.StatusCode
			}
			for range 2 {
				require.Equal(t, 200, get("198.51.100.1"))
			}
			require.Equal(t, 429, get("198.51.100.1"))
			assert.Equal(t, tc.wantClient, []int{get("198.51.100.2"), get("198.51.100.2")})
			if tc.trustUnix {
				assert.Equal(t, "198.51.100.1", keys[0])
				assert.Equal(t, []int{200, 200, 429}, []int{get(""), get(""), get("")}, "no header from the socket peer: the one shared unkeyed bucket")
				assert.Equal(t, addrlimit.UnkeyedKey, keys[len(keys)-1])
			} else {
				assert.Equal(t, addrlimit.UnkeyedKey, keys[0])
			}
		})
	}
}

func TestUnixSocketPeerWithoutServerContext(t *testing.T) {
	tp := mustProxies(t, "X-Forwarded-For", netip.MustParsePrefix("127.0.0.0/8")).WithUnixSocket()
	for _, ra := range []string{"@", "", "/run/nginx.sock"} {
		a, err := tp.ClientAddr(req(ra, "X-Forwarded-For", "198.51.100.7"))
		require.NoError(t, err, ra)
		assert.Equal(t, "198.51.100.7", a.String())
	}
	// A TCP peer that is not trusted is still the client, header ignored.
	a, err := tp.ClientAddr(req("203.0.113.9:1", "X-Forwarded-For", "198.51.100.7"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", a.String())
	// A garbage RemoteAddr is not a Unix socket.
	_, err = tp.ClientAddr(req("example.com:80", "X-Forwarded-For", "198.51.100.7"))
	assert.ErrorIs(t, err, addrlimit.ErrNoClientAddress)
}

func TestProxyWarningsMatchErrProxyHeader(t *testing.T) {
	tp := mustProxies(t, "X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/8"))
	for _, xff := range []string{"", "garbage", "unknown, 10.0.0.2"} {
		r := req("10.0.0.1:1")
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		_, err := tp.ClientAddr(r)
		require.ErrorIs(t, err, addrlimit.ErrProxyHeader, xff)
		assert.Contains(t, err.Error(), "X-Forwarded-For")
		assert.NotContains(t, err.Error(), "garbage", "header content never appears in errors")
	}
}

// The zero TrustedProxies trusts no proxy: it keys by the peer, as
// RemoteAddrKey does, whatever header the client sends.
func TestZeroTrustedProxiesIsRemoteAddrKey(t *testing.T) {
	var zero addrlimit.TrustedProxies
	for _, remote := range []string{"192.0.2.1:1", "[2001:db8:1:2::9]:1", "@"} {
		r := req(remote, "X-Forwarded-For", "203.0.113.9", "Forwarded", "for=203.0.113.9")
		got, gotErr := zero.Key(r)
		want, wantErr := addrlimit.RemoteAddrKey(r)
		assert.Equal(t, want, got, remote)
		assert.Equal(t, wantErr, gotErr, remote)
	}
}
