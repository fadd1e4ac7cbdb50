package addrlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The raw-value forms of Match and ClientAddr serve protocols without an
// *http.Request (gRPC metadata); they must decide exactly as the HTTP path.

func TestMatchAuthorizationAgreesWithMatch(t *testing.T) {
	tok, err := mustToken(t, secret).WithRetired(retiredSecret)
	require.NoError(t, err)
	tests := []struct {
		name   string
		values []string
	}{
		{"accepted", []string{"Bearer " + secret}},
		{"scheme in any case", []string{"bEARER " + secret}},
		{"several spaces", []string{"Bearer    " + secret}},
		{"retired secret is not accepted", []string{"Bearer " + retiredSecret}},
		{"none", nil},
		{"empty list", []string{}},
		{"empty value", []string{""}},
		{"two values", []string{"Bearer " + secret, "Bearer " + secret}},
		{"comma-joined", []string{"Bearer " + secret + ", Bearer " + secret}},
		{"other scheme", []string{"Basic " + secret}},
		{"wrong token", []string{"Bearer " + strings.ToUpper(secret)}},
		{"outside b64token", []string{"Bearer " + secret + " x"}},
		{"too long", []string{"Bearer " + strings.Repeat("a", 600)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: http.Header{}}
			if tc.values != nil {
				r.Header["Authorization"] = tc.values
			}
			if got, want := tok.MatchAuthorization(tc.values), tok.Match(r); got != want {
				t.Fatalf("MatchAuthorization(%q) = %v, Match = %v", tc.values, got, want)
			}
		})
	}
	assert.True(t, tok.MatchAuthorization([]string{"Bearer " + secret}), "the accepted secret")
	assert.False(t, tok.MatchAuthorization([]string{"Bearer " + retiredSecret}), "a retired secret")
}

func FuzzMatchAuthorizationAgreesWithMatch(f *testing.F) {
	tok := mustToken(f, secret)
	f.Add("Bearer "+secret, "")
	f.Add("bearer  "+secret, "x")
	f.Add("Basic "+secret, "Bearer "+secret)
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, vals := range [][]string{{a}, {a, b}} {
			r := &http.Request{Header: http.Header{"Authorization": vals}}
			if got, want := tok.MatchAuthorization(vals), tok.Match(r); got != want {
				t.Fatalf("MatchAuthorization(%q) = %v, Match = %v", vals, got, want)
			}
		}
	})
}

func TestClientAddrFromAgreesWithClientAddr(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	tests := []struct {
		name   string
		peer   string // RemoteAddr form
		values []string
	}{
		{"untrusted peer: header ignored", "198.51.100.1:1", []string{"203.0.113.9"}},
		{"trusted peer", "10.0.0.1:1", []string{"203.0.113.9"}},
		{"trusted peer, forged left part", "10.0.0.1:1", []string{"1.2.3.4, 203.0.113.9, 10.0.0.2"}},
		{"several lines", "10.0.0.1:1", []string{"1.2.3.4", "203.0.113.9"}},
		{"trusted peer, no header", "10.0.0.1:1", nil},
		{"trusted peer, garbage", "10.0.0.1:1", []string{"garbage"}},
		{"IPv4-mapped trusted peer", "[::ffff:10.0.0.1]:1", []string{"203.0.113.9"}},
		{"IPv4-mapped client", "10.0.0.1:1", []string{"::ffff:203.0.113.9"}},
		{"IPv6 client", "10.0.0.1:1", []string{"2001:db8:1:2::99"}},
		{"zoned peer", "[fe80::1%eth0]:1", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
			if tc.values != nil {
				r.Header["X-Forwarded-For"] = tc.values
			}
			want, wantErr := p.ClientAddr(r)
			got, err := p.ClientAddrFrom(netip.MustParseAddrPort(tc.peer).Addr(), tc.values)
			assert.Equal(t, want, got, "address")
			assert.Equal(t, wantErr != nil, err != nil, "error: %v, HTTP path: %v", err, wantErr)
			assert.Equal(t, errors.Is(wantErr, addrlimit.ErrProxyHeader), errors.Is(err, addrlimit.ErrProxyHeader), "ErrProxyHeader")
		})
	}
}

func TestClientAddrFromZeroPeer(t *testing.T) {
	p := mustProxies(t, "X-Forwarded-For", lbRange)
	_, err := p.ClientAddrFrom(netip.Addr{}, []string{"203.0.113.9"})
	assert.ErrorIs(t, err, addrlimit.ErrNoClientAddress, "a peer without an address is not trusted by default")
	a, err := p.WithUnixSocket().ClientAddrFrom(netip.Addr{}, []string{"203.0.113.9"})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("203.0.113.9"), a, "WithUnixSocket trusts a peer without an address")
	assert.Equal(t, "X-Forwarded-For", mustProxies(t, "x-forwarded-for", lbRange).Header(), "Header is canonical")
}

func TestAllowAsExemptsAndFlagsLikeAllow(t *testing.T) {
	tok, err := mustToken(t, secret).WithRetired(retiredSecret)
	require.NoError(t, err)
	var seen []*http.Request
	lim := mustNew(t, 1, time.Hour,
		addrlimit.WithInternalToken(tok),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "write", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Hour / 3}}}),
		addrlimit.WithObserver(func(r *http.Request, _ addrlimit.Decision) { seen = append(seen, r) }))
	call := func(auth string) *http.Request {
		r := req("192.0.2.1:1").WithContext(context.Background())
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}

	for range 3 {
		d := lim.AllowAs(call("Bearer "+secret), "", nil, 1)
		assert.Equal(t, addrlimit.Exempt, d.Outcome, "accepted secret")
	}
	assert.Equal(t, addrlimit.Allowed, lim.AllowAs(call(""), "", nil, 1).Outcome, "the exempt calls charged nothing")
	d := lim.AllowAs(call("Bearer "+retiredSecret), "", nil, 1)
	assert.Equal(t, addrlimit.Limited, d.Outcome, "retired secret is charged")
	assert.True(t, d.RetiredToken, "retired secret flagged")
	assert.Equal(t, "192.0.2.1", d.Key, "nil key is RemoteAddrKey")

	d = lim.AllowAs(call("Bearer wrong-token-0123456789"), "write", nil, 3)
	assert.Equal(t, addrlimit.Allowed, d.Outcome, "own policy, own bucket")
	assert.Equal(t, "write", d.Policy)
	assert.Equal(t, 3, d.Cost)
	assert.Equal(t, 0, d.Remaining, "cost 3 of burst 3")

	s := lim.Stats()
	assert.Equal(t, uint64(3), s.Exempt, "Stats.Exempt")
	assert.Equal(t, uint64(1), s.RetiredTokenLimited, "Stats.RetiredTokenLimited")
	assert.Equal(t, uint64(1), s.CredentialedLimited, "Stats.CredentialedLimited")
	assert.Len(t, seen, 6, "observers are told every decision, exempt ones included")
	for _, r := range seen {
		assert.NotNil(t, r, "observers get the request")
	}
}

func TestAllowAsBadInputNeverSkipsTheLimit(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	keyErr := errors.New("key warning")
	d := lim.AllowAs(req("192.0.2.1:1"), "nope", func(*http.Request) (string, error) { return "", keyErr }, 1)
	assert.Equal(t, addrlimit.Allowed, d.Outcome)
	assert.Equal(t, addrlimit.UnkeyedKey, d.Key, "empty key with an error: UnkeyedKey")
	assert.ErrorIs(t, d.Err, keyErr)
	assert.ErrorIs(t, d.Err, addrlimit.ErrUnknownPolicy)
	d = lim.AllowAs(req("192.0.2.2:1"), "", func(*http.Request) (string, error) { return "", nil }, 1)
	assert.Equal(t, addrlimit.Limited, d.Outcome, "an empty key shares UnkeyedKey")
	assert.ErrorIs(t, d.Err, addrlimit.ErrEmptyKey)
	d = lim.AllowAs(req("192.0.2.3:1"), "", func(*http.Request) (string, error) { return "k", keyErr }, 2)
	assert.Equal(t, addrlimit.Limited, d.Outcome, "cost over burst")
	assert.ErrorIs(t, d.Err, addrlimit.ErrCostOverBurst)
	assert.ErrorIs(t, d.Err, keyErr, "the key's warning is kept")
	assert.Equal(t, "k", d.Key)
}
