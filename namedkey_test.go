package addrlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// typedForms are ways people type the address of a client: the client's
// request comes from peer (RemoteAddr), and each form names its bucket.
var typedForms = []struct {
	peer, bucket string
	forms        []string
}{
	{"[2001:db8:1:2::abcd]:5555", "2001:db8:1:2::/64", []string{
		"2001:db8:1:2::1",         // another address in the client's /64
		"2001:db8:1:2::abcd",      // the client's own address
		"[2001:db8:1:2::1]:443",   // from a log line, with its port
		"2001:db8:1:2::1%eth0",    // with a zone
		"2001:DB8:1:2:0:0:0:1",    // uncompressed, upper case
		"2001:db8:1:2::1/64",      // as `ip addr` shows it
		"2001:db8:1:2:0:0:0:0/64", // the key, written another way
		"2001:db8:1:2:8000::/65",  // a network inside the /64
		"2001:db8:1:2::/64",       // the key itself
	}},
	{"192.0.2.1:5555", "192.0.2.1", []string{
		"192.0.2.1",
		"::ffff:192.0.2.1", // IPv4-mapped
		"192.0.2.1:443",
		"[::ffff:192.0.2.1]:443",
		"64:ff9b::192.0.2.1", // NAT64, RFC 6052
		"64:ff9b::c000:201",
		"192.0.2.1/32",
	}},
}

// addrKeyed builds limiters that key requests by address (burst 3), each
// with a function that makes a request from peer.
func addrKeyed(t *testing.T) map[string]func() (*addrlimit.Limiter, func(peer string) *http.Request) {
	lb := netip.MustParsePrefix("10.0.0.0/24")
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", lb)
	require.NoError(t, err)
	direct := func(peer string) *http.Request { return req(peer) }
	return map[string]func() (*addrlimit.Limiter, func(string) *http.Request){
		"default key": func() (*addrlimit.Limiter, func(string) *http.Request) {
			return mustNew(t, 3, time.Hour), direct
		},
		"RemoteAddrKey": func() (*addrlimit.Limiter, func(string) *http.Request) {
			return mustNew(t, 3, time.Hour, addrlimit.WithKeyFunc(addrlimit.RemoteAddrKey)), direct
		},
		"TrustedProxies.Key": func() (*addrlimit.Limiter, func(string) *http.Request) {
			return mustNew(t, 3, time.Hour, addrlimit.WithKeyFunc(proxies.Key)), func(peer string) *http.Request {
				return req("10.0.0.7:443", "X-Forwarded-For", peer) // the load balancer forwards the client
			}
		},
	}
}

// Reset and Peek given an address as people type it reach the client's
// bucket (they used to miss it: a full IPv6 address inside the client's /64,
// "::ffff:192.0.2.1", "192.0.2.1:443" and "[2001:db8::1]:443" returned nil
// and reset nothing), whether requests are keyed by the default key,
// RemoteAddrKey or TrustedProxies.Key.
func TestResetAndPeekAsPeopleTypeAnAddress(t *testing.T) {
	ctx := context.Background()
	for name, build := range addrKeyed(t) {
		t.Run(name, func(t *testing.T) {
			var missed []string
			forms := 0
			for _, c := range typedForms {
				for _, form := range c.forms {
					forms++
					lim, from := build()
					for range 3 {
						require.Equal(t, addrlimit.Allowed, lim.Allow(from(c.peer)).Outcome)
					}
					require.Equal(t, addrlimit.Limited, lim.Allow(from(c.peer)).Outcome, "%s drained", c.peer)
					p, err := lim.Peek(ctx, "", form)
					resetErr := lim.Reset(ctx, "", form)
					d := lim.Allow(from(c.peer))
					if err != nil || p.Outcome != addrlimit.Limited || p.Remaining != 0 || p.Key != c.bucket ||
						resetErr != nil || d.Outcome != addrlimit.Allowed {
						missed = append(missed, fmt.Sprintf("%q: Peek %v, %d left, key %q, %v; Reset %v, then %s is %v",
							form, p.Outcome, p.Remaining, p.Key, err, resetErr, c.peer, d.Outcome))
					}
				}
			}
			if len(missed) > 0 {
				t.Errorf("%d of %d typed forms missed the client's bucket:\n%s", len(missed), forms, strings.Join(missed, "\n"))
			}
		})
	}
}

// A network that holds several clients' buckets names none of them: Reset
// and Peek refuse it rather than reset nothing.
func TestResetAndPeekRefuseANetworkOfSeveralBuckets(t *testing.T) {
	ctx := context.Background()
	lim := mustNew(t, 3, time.Hour)
	for _, network := range []string{"2001:db8::/48", "2001:db8:1:2::/63", "192.0.2.0/24", "::ffff:192.0.2.0/120", "64:ff9b::/96"} {
		_, err := lim.Peek(ctx, "", network)
		assert.Error(t, err, "Peek(%q)", network)
		assert.Error(t, lim.Reset(ctx, "", network), "Reset(%q)", network)
	}
}

// AllowKey normalises the same way: one client never has two buckets, so
// AllowKey(ctx, "", r.RemoteAddr, n) charges the request's bucket, and an
// address typed in any form charges its client. What AllowKey reaches this
// way is always the bucket whose key the caller could have passed as it is:
// normalisation never moves a key onto a bucket other than the one its
// address names, and keys with a prefix ("user:") are never addresses.
func TestAllowKeyChargesTheClientOfAnAddressKey(t *testing.T) {
	ctx := context.Background()
	for name, build := range addrKeyed(t) {
		t.Run(name, func(t *testing.T) {
			for _, c := range typedForms {
				lim, from := build()
				for _, form := range c.forms[:2] {
					d := lim.AllowKey(ctx, "", form, 1)
					require.Equal(t, addrlimit.Allowed, d.Outcome, form)
					assert.Equal(t, c.bucket, d.Key, "AllowKey(%q)", form)
				}
				d := lim.Allow(from(c.peer))
				assert.Equal(t, 0, d.Remaining, "%s after two AllowKey of its address: one bucket of 3", c.peer)
				assert.Equal(t, 1, lim.Stats().Keys, "one client, one bucket")
			}
		})
	}
	lim := mustNew(t, 3, time.Hour)
	for _, key := range []string{
		"user:192.0.2.1", "user:1", "tenant:2001:db8::1", "user:[2001:db8::1]:443", "192.0.2.1:443:1",
		"192.0.2.1:65536", "[192.0.2.1]:443", "2001:db8::1%", "2001:db8::/48", addrlimit.UnkeyedKey,
	} {
		assert.Equal(t, key, lim.AllowKey(ctx, "", key, 1).Key, "%q is not one client's address: taken as it is", key)
	}
	for _, c := range typedForms {
		for _, form := range c.forms {
			d := lim.AllowKey(ctx, "", form, 1)
			assert.Equal(t, c.bucket, d.Key, "AllowKey(%q)", form)
			assert.Equal(t, d.Key, lim.AllowKey(ctx, "", d.Key, 1).Key, "the key %q names itself", d.Key)
		}
	}
}

// With a KeyFunc of the caller's own, keys mean what that function makes
// them mean: an address-looking key is taken as it is (here a KeyFunc keys
// by the whole RemoteAddr, port included).
func TestNamedKeysAreLiteralWithACustomKeyFunc(t *testing.T) {
	ctx := context.Background()
	lim := mustNew(t, 3, time.Hour, addrlimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.RemoteAddr, nil }))
	for range 3 {
		lim.Allow(req("192.0.2.1:443"))
	}
	require.Equal(t, addrlimit.Limited, lim.Allow(req("192.0.2.1:443")).Outcome)
	p, err := lim.Peek(ctx, "", "192.0.2.1:443")
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.1:443", p.Key)
	assert.Equal(t, 0, p.Remaining, "the KeyFunc's own key")
	assert.Equal(t, "192.0.2.1:443", lim.AllowKey(ctx, "", "192.0.2.1:443", 1).Key)
	require.NoError(t, lim.Reset(ctx, "", "192.0.2.1:443"))
	assert.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.1:443")).Outcome)
	// A wrapper around an address KeyFunc is a KeyFunc of the caller's own.
	wrapped := mustNew(t, 3, time.Hour, addrlimit.WithKeyFunc(func(r *http.Request) (string, error) { return addrlimit.RemoteAddrKey(r) }))
	assert.Equal(t, "192.0.2.1:443", wrapped.AllowKey(ctx, "", "192.0.2.1:443", 1).Key)
}

// What AllowKey reaches through a key written as an address is exactly the
// bucket of a request from that RemoteAddr, the key it reaches names itself
// (so the caller could have passed that key as it is: normalising opens no
// bucket that was out of reach), and a key with a prefix ("user:") is
// never read as an address, whatever follows it.
func FuzzAllowKeyReachesOnlyTheBucketItsAddressNames(f *testing.F) {
	for _, c := range typedForms {
		for _, s := range c.forms {
			f.Add(s)
		}
	}
	for _, s := range []string{"user:1", "192.0.2.1:443:1", "2001:db8::/48", "[::1]", "1.2.3.4%x", "::%a/64", "0:0:0:0:0:ffff:c000:201/128"} {
		f.Add(s)
	}
	lim := mustNew(f, 1_000_000_000, time.Second)
	f.Fuzz(func(t *testing.T, s string) {
		ctx := context.Background()
		k := lim.AllowKey(ctx, "", s, 1).Key
		if s == "" {
			return
		}
		if want, err := addrlimit.RemoteAddrKey(req(s)); err == nil && k != want {
			t.Fatalf("AllowKey(%q) charged %q, a request from that RemoteAddr %q", s, k, want)
		}
		if again := lim.AllowKey(ctx, "", k, 1).Key; again != k {
			t.Fatalf("AllowKey(%q) charged %q, which names %q", s, k, again)
		}
		for _, prefix := range []string{"user:", "tenant:"} {
			if got := lim.AllowKey(ctx, "", prefix+s, 1).Key; got != prefix+s {
				t.Fatalf("AllowKey(%q) charged %q", prefix+s, got)
			}
		}
	})
}
