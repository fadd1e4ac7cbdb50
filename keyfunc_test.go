package addrlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		{"NAT64 equals its embedded IPv4 (express-rate-limit PR #667)", req("[64:ff9b::192.0.2.1]:1"), req("192.0.2.1:1"), true},
		{"two IPv4 clients behind NAT64 stay apart", req("[64:ff9b::192.0.2.1]:1"), req("[64:ff9b::192.0.2.2]:1"), false},
		{"NAT64 of one IPv4 is not grouped with the IPv6 64:ff9b::/64", req("[64:ff9b::192.0.2.1]:1"), req("[64:ff9b::1:0:0:1]:1"), false},
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
			require.Equal(t, addrlimit.Allowed, lim.Allow(tc.a).Outcome, "first request")
			d := lim.Allow(tc.b)
			assert.Equal(t, tc.sameBucket, d.Outcome == addrlimit.Limited, "same bucket: second request %v (key %q)", d.Outcome, d.Key)
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
		{"64:ff9b::192.0.2.1", "192.0.2.1"},
		{"64:ff9b::c633:6401", "198.51.100.1"},
		{"64:ff9b::1:c633:6401", "64:ff9b::/64"},    // outside the /96: not NAT64
		{"64:ff9b:1::c633:6401", "64:ff9b:1::/64"},  // RFC 8215 local use: operator-chosen length, grouped by /64
		{"::ffff:64:ff9b", "0.100.255.155"},         // IPv4-mapped, as before
		{"64:ff9b::ffff:c633:6401", "64:ff9b::/64"}, // bits 80-95 set: outside the /96
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, addrlimit.AddrKey(netip.MustParseAddr(tc.in)), "AddrKey(%s)", tc.in)
	}
	assert.Empty(t, addrlimit.AddrKey(netip.Addr{}), "AddrKey(zero)")
}

func TestRemoteAddrKeyErrors(t *testing.T) {
	for _, ra := range []string{"", "@", "example.com:80", "192.0.2.1:", "[::1", "1.2.3.4.5:6"} {
		k, err := addrlimit.RemoteAddrKey(req(ra))
		assert.Error(t, err, "RemoteAddrKey(%q) = %q, want an error", ra, k)
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
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { errs = append(errs, d.Err) }))
			h := lim.Handler(okHandler)
			got := codes(h, 4, func() *http.Request { return req("192.0.2.1:1") })
			require.Equal(t, []int{200, 200, 429, 429}, got, "codes")
			d := lim.Allow(req("192.0.2.9:1"))
			require.Equal(t, tc.want, d.Key, "decision %+v", d)
			require.Error(t, d.Err, "decision %+v, want an error", d)
			for _, err := range errs {
				require.Error(t, err, "observer was not told the key error")
			}
			assert.Equal(t, uint64(5), lim.Stats().KeyErrors, "KeyErrors")
		})
	}
}

func FuzzRemoteAddrKey(f *testing.F) {
	for _, s := range []string{"192.0.2.1:80", "[2001:db8::1]:443", "[fe80::1%eth0]:1", "[::ffff:1.2.3.4]:5", "1.2.3.4", "@", "", "[::1]:", "::1", "[64:ff9b::c000:201]:1", "[64:ff9b:1::1]:1", "[64:ff9b::1:0:0:0]:1"} {
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
		// An IPv4 client has one key however it is written: plain, mapped
		// or behind NAT64 (RFC 6052 well-known prefix).
		if refAddr.Unmap().Is4() {
			v4 := refAddr.Unmap().As4()
			nat64 := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
			if k := addrlimit.AddrKey(nat64); k != k1 {
				t.Fatalf("AddrKey(%v) = %q, the plain address %q", nat64, k, k1)
			}
		}
		// A key is a normalised address or /64, and normalising it again
		// changes nothing. A /64 is checked at its last address: its first
		// may lie in a /96 keyed as IPv4 (64:ff9b::/64 holds the NAT64
		// prefix, so 64:ff9b::1:0:0:0 is keyed "64:ff9b::/64" while
		// 64:ff9b:: is 0.0.0.0 behind NAT64); the last never does.
		var a netip.Addr
		if p, err := netip.ParsePrefix(k1); err == nil {
			if p.Bits() != 64 || p.Masked() != p {
				t.Fatalf("key %q is not a masked /64", k1)
			}
			last := p.Addr().As16()
			for i := 8; i < 16; i++ {
				last[i] = 0xff
			}
			a = netip.AddrFrom16(last)
		} else if a, err = netip.ParseAddr(k1); err != nil || !a.Is4() {
			t.Fatalf("key %q for %q is neither an IPv4 address nor a /64", k1, ra)
		}
		if again := addrlimit.AddrKey(a); again != k1 {
			t.Fatalf("AddrKey(%v) = %q, not the fixed point %q", a, again, k1)
		}
	})
}
