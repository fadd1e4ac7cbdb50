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

// A Call is decided exactly as the HTTP request that says the same.

// decideLikeAllow decides, on two fresh Limiters built with opts, the
// request r by Allow and the Call c by Decide, and fails unless the two
// decisions agree in everything but what the clock sets.
func decideLikeAllow(t *testing.T, r *http.Request, c addrlimit.Call, opts ...addrlimit.Option) addrlimit.Decision {
	t.Helper()
	want := mustNew(t, 2, time.Hour, opts...).Allow(r)
	d := mustNew(t, 2, time.Hour, opts...).Decide(context.Background(), c)
	got := d
	for _, d := range []*addrlimit.Decision{&want, &got} {
		d.RetryAfter, d.ResetAfter = 0, 0
		if d.Err != nil {
			d.Err = errors.New(d.Err.Error())
		}
	}
	assert.Equal(t, public(want), public(got), "Allow and Decide")
	assert.Equal(t, want.Limit(), got.Limit(), "Allow and Decide: Limit")
	return d
}

func TestDecideExemptsAndFlagsLikeAllow(t *testing.T) {
	tok, err := mustToken(t, secret).WithRetired(retiredSecret)
	require.NoError(t, err)
	tests := []struct {
		name   string
		values []string
		want   addrlimit.Outcome
	}{
		{"accepted", []string{"Bearer " + secret}, addrlimit.Exempt},
		{"scheme in any case", []string{"bEARER " + secret}, addrlimit.Exempt},
		{"several spaces", []string{"Bearer    " + secret}, addrlimit.Exempt},
		{"retired secret is not accepted", []string{"Bearer " + retiredSecret}, addrlimit.Allowed},
		{"none", nil, addrlimit.Allowed},
		{"empty list", []string{}, addrlimit.Allowed},
		{"empty value", []string{""}, addrlimit.Allowed},
		{"two values", []string{"Bearer " + secret, "Bearer " + secret}, addrlimit.Allowed},
		{"comma-joined", []string{"Bearer " + secret + ", Bearer " + secret}, addrlimit.Allowed},
		{"other scheme", []string{"Basic " + secret}, addrlimit.Allowed},
		{"wrong token", []string{"Bearer " + strings.ToUpper(secret)}, addrlimit.Allowed},
		{"outside b64token", []string{"Bearer " + secret + " x"}, addrlimit.Allowed},
		{"too long", []string{"Bearer " + strings.Repeat("a", 600)}, addrlimit.Allowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req("192.0.2.1:1")
			if tc.values != nil {
				r.Header["Authorization"] = tc.values
			}
			c := addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.1"), Authorization: tc.values, Route: "/"}
			d := decideLikeAllow(t, r, c, addrlimit.WithInternalToken(tok))
			assert.Equal(t, tc.want, d.Outcome)
			assert.Equal(t, tc.want != addrlimit.Exempt && len(tc.values) > 0, d.Credentialed, "Credentialed")
			assert.Equal(t, tc.name == "retired secret is not accepted", d.RetiredToken, "RetiredToken")
		})
	}
}

func FuzzDecideExemptsLikeAllow(f *testing.F) {
	tok := mustToken(f, secret)
	f.Add("Bearer "+secret, "")
	f.Add("bearer  "+secret, "x")
	f.Add("Basic "+secret, "Bearer "+secret)
	lim := mustNew(f, 1, time.Hour, addrlimit.WithInternalToken(tok))
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, vals := range [][]string{{a}, {a, b}} {
			r := req("192.0.2.1:1", "Authorization", "x")
			r.Header["Authorization"] = vals
			c := addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.1"), Authorization: vals}
			got, want := lim.Decide(context.Background(), c).Outcome == addrlimit.Exempt, lim.Allow(r).Outcome == addrlimit.Exempt
			if got != want {
				t.Fatalf("Decide of %q exempt: %v, Allow: %v", vals, got, want)
			}
		}
	})
}

// An address is keyed by Decide as the request from it by Allow, in every
// notation, with the same fallback when there is none.
func TestDecideKeysAddressesLikeAllow(t *testing.T) {
	for _, peer := range []string{"192.0.2.1:1", "[::ffff:192.0.2.1]:1", "[2001:db8:1:2::99]:1", "[fe80::1%eth0]:1", "[64:ff9b::c000:201]:1"} {
		c := addrlimit.Call{Addr: netip.MustParseAddrPort(peer).Addr(), Route: "/"}
		decideLikeAllow(t, req(peer), c)
	}
	d := decideLikeAllow(t, req("not-an-address"), addrlimit.Call{Route: "/"})
	assert.Equal(t, addrlimit.UnkeyedKey, d.Key)
	assert.ErrorIs(t, d.Err, addrlimit.ErrNoClientAddress)
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

func TestDecideExemptsCountsAndObserves(t *testing.T) {
	tok, err := mustToken(t, secret).WithRetired(retiredSecret)
	require.NoError(t, err)
	var seen []addrlimit.Decision
	lim := mustNew(t, 1, time.Hour,
		addrlimit.WithInternalToken(tok),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "write", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Hour / 3}}}),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { seen = append(seen, d) }))
	call := func(auth string) addrlimit.Call {
		c := addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.1"), Route: "/pkg.Svc/Get"}
		if auth != "" {
			c.Authorization = []string{auth}
		}
		return c
	}
	ctx := context.Background()
	for range 3 {
		d := lim.Decide(ctx, call("Bearer "+secret))
		assert.Equal(t, addrlimit.Exempt, d.Outcome, "accepted secret")
	}
	assert.Equal(t, addrlimit.Allowed, lim.Decide(ctx, call("")).Outcome, "the exempt calls charged nothing")
	d := lim.Decide(ctx, call("Bearer "+retiredSecret))
	assert.Equal(t, addrlimit.Limited, d.Outcome, "retired secret is charged")
	assert.True(t, d.RetiredToken, "retired secret flagged")
	assert.Equal(t, "192.0.2.1", d.Key, "the address's key")

	c := call("Bearer wrong-token-0123456789")
	c.Policy, c.Cost = "write", 3
	d = lim.Decide(ctx, c)
	assert.Equal(t, addrlimit.Allowed, d.Outcome, "own policy, own bucket")
	assert.Equal(t, "write", d.Policy)
	assert.Equal(t, 3, d.Cost)
	assert.Equal(t, 0, d.Remaining, "cost 3 of burst 3")

	s := lim.Stats()
	assert.Equal(t, uint64(3), s.Exempt, "Stats.Exempt")
	assert.Equal(t, uint64(1), s.RetiredTokenLimited, "Stats.RetiredTokenLimited")
	assert.Equal(t, uint64(1), s.CredentialedLimited, "Stats.CredentialedLimited")
	require.Len(t, seen, 6, "observers are told every decision, exempt ones included")
	for _, d := range seen {
		assert.Equal(t, "/pkg.Svc/Get", d.Route, "observers see the route")
	}
}

func TestDecideBadInputNeverSkipsTheLimit(t *testing.T) {
	lim := mustNew(t, 1, time.Hour)
	ctx := context.Background()
	keyErr := errors.New("key warning")
	d := lim.Decide(ctx, addrlimit.Call{Policy: "nope", Err: keyErr})
	assert.Equal(t, addrlimit.Allowed, d.Outcome)
	assert.Equal(t, addrlimit.UnkeyedKey, d.Key, "no address, no key: UnkeyedKey")
	assert.ErrorIs(t, d.Err, keyErr)
	assert.ErrorIs(t, d.Err, addrlimit.ErrUnknownPolicy)
	assert.ErrorIs(t, d.Err, addrlimit.ErrNoClientAddress)
	assert.Equal(t, "default", d.Policy)
	d = lim.Decide(ctx, addrlimit.Call{})
	assert.Equal(t, addrlimit.Limited, d.Outcome, "every call without an address shares UnkeyedKey")
	d = lim.Decide(ctx, addrlimit.Call{Addr: netip.MustParseAddr("192.0.2.2"), Cost: -1})
	assert.Equal(t, addrlimit.Allowed, d.Outcome)
	assert.ErrorIs(t, d.Err, addrlimit.ErrInvalidCost)
	assert.Equal(t, 1, d.Cost, "a negative cost is charged as 1")
	d = lim.Decide(ctx, addrlimit.Call{Key: "k", Err: keyErr, Cost: 2})
	assert.Equal(t, addrlimit.Limited, d.Outcome, "cost over burst")
	assert.ErrorIs(t, d.Err, addrlimit.ErrCostOverBurst)
	assert.ErrorIs(t, d.Err, keyErr, "the call's warning is kept")
	assert.Equal(t, "k", d.Key)
	d = lim.Decide(ctx, addrlimit.Call{Key: "[::ffff:192.0.2.2]:443"})
	assert.Equal(t, "192.0.2.2", d.Key, "a key written as an address names its client's bucket, as for AllowKey")
	assert.Equal(t, addrlimit.Limited, d.Outcome, "the bucket the Addr call above emptied")
}

// QuotaFields renders what Handler sends: the same fields, values and
// order, lower-case names, without the refusal's own fields.
func TestQuotaFieldsAreWhatHandlerSends(t *testing.T) {
	for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderXRateLimit, addrlimit.HeaderNone} {
		for _, burst := range []int{3, 5000} {
			var last addrlimit.Decision
			lim := mustNew(t, burst, time.Hour, addrlimit.WithHeaders(style),
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { last = d }))
			h := lim.Handler(okHandler)
			for i := range burst + 1 {
				if i > 2 && i < burst-2 {
					lim.AllowKey(context.Background(), "", "192.0.2.1", 1)
					continue
				}
				w := serve(h, req("192.0.2.1:1"))
				want := map[string][]string{}
				for k, v := range w.Header() {
					switch k {
					case "Retry-After", "Cache-Control", "Content-Type", "X-Content-Type-Options":
					default:
						want[strings.ToLower(k)] = v
					}
				}
				got := map[string][]string{}
				var names []string
				lim.QuotaFields(last, func(name, value string) {
					got[name] = append(got[name], value)
					names = append(names, name)
				})
				require.Equal(t, want, got, "%v burst %d request %d (%v)", style, burst, i, last.Outcome)
				if style == addrlimit.HeaderDraft {
					assert.Equal(t, []string{"ratelimit-policy", "ratelimit"}, names, "order")
				}
			}
			assert.Equal(t, addrlimit.Limited, last.Outcome, "the last request was refused")
		}
	}
	lim := mustNew(t, 1, time.Hour)
	for _, d := range []addrlimit.Decision{
		{Outcome: addrlimit.Exempt},
		{Outcome: addrlimit.Allowed, Policy: "default"}, // not made by lim: quota unknown
		{Outcome: addrlimit.Allowed, Policy: "default", QuotaUnknown: true},
		{Outcome: addrlimit.Allowed, Policy: "other", Remaining: 1},
		{},
	} {
		lim.QuotaFields(d, func(name, _ string) { t.Errorf("QuotaFields(%+v) set %s", d, name) })
	}
}
