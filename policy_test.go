package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/addrlimit/addrlimit"
)

// partners maps verified partner API keys to partner names, as a real
// service would after checking the key.
var partners = map[string]string{"pk-acme-0123456789": "acme", "pk-globex-0123456789": "globex"}

// byPartner selects the "partner" policy, keyed by partner, for requests
// with a known partner key; everyone else gets the default per-address one.
func byPartner(r *http.Request) (policy, key string, err error) {
	k := r.Header.Get("X-Partner-Key")
	if k == "" {
		return "", "", nil
	}
	name, ok := partners[k]
	if !ok {
		return "", "", nil // unknown key: an anonymous client
	}
	return "partner", "partner:" + name, nil
}

func TestPerIdentityPolicies(t *testing.T) {
	lim := mustNew(t, 2, time.Hour,
		addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Hour / 5}}}),
		addrlimit.WithPolicySelector(byPartner))
	h := lim.Handler(okHandler)
	shared := "10.0.0.1:1" // partners and anonymous clients behind one egress

	acme := codes(h, 7, func() *http.Request { return req(shared, "X-Partner-Key", "pk-acme-0123456789") })
	globex := codes(h, 7, func() *http.Request { return req(shared, "X-Partner-Key", "pk-globex-0123456789") })
	anon := codes(h, 4, func() *http.Request { return req(shared) })
	forged := codes(h, 4, func() *http.Request { return req(shared, "X-Partner-Key", "pk-made-up") })
	assert.Equal(t, 5, count(acme, 200), "acme has its own 5")
	assert.Equal(t, 5, count(globex, 200), "globex has its own 5")
	assert.Equal(t, 2, count(anon, 200), "the address keeps its 2")
	assert.Equal(t, 0, count(forged, 200), "an unknown partner key is the address, already spent")

	w := serve(h, req(shared, "X-Partner-Key", "pk-acme-0123456789"))
	assert.Equal(t, `"partner";q=5;w=3600`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"partner";r=0;t=720`, w.Header().Get("RateLimit"))
	w = serve(h, req("10.0.0.2:1"))
	assert.Equal(t, `"default";q=2;w=3600`, w.Header().Get("RateLimit-Policy"))

	s := lim.Stats()
	require.Len(t, s.Policies, 2)
	assert.Equal(t, addrlimit.PolicyStats{Name: "default", Allowed: 3, Limited: 6, Limits: []addrlimit.LimitStats{{Name: "1h", Limited: 6}}, Keys: 2}, s.Policies[0])
	assert.Equal(t, addrlimit.PolicyStats{Name: "partner", Allowed: 10, Limited: 5, Limits: []addrlimit.LimitStats{{Name: "1h", Limited: 5}}, Keys: 2}, s.Policies[1])
	assert.Equal(t, s.Policies[0].Allowed+s.Policies[1].Allowed, s.Allowed)
	assert.Equal(t, []addrlimit.Policy{{Name: "default", Limits: []addrlimit.Limit{{Name: "1h", Burst: 2, Interval: 30 * time.Minute}}}, {Name: "partner", Limits: []addrlimit.Limit{{Name: "1h", Burst: 5, Interval: 12 * time.Minute}}}}, lim.Policies())
}

func TestPolicySelectorFailuresFallBackToTheDefault(t *testing.T) {
	selErr := errors.New("credential store unreachable")
	for _, tc := range []struct {
		name    string
		sel     addrlimit.PolicySelector
		wantErr error
	}{
		{"unknown policy", func(*http.Request) (string, string, error) { return "platinum", "k", nil }, addrlimit.ErrUnknownPolicy},
		{"selector error", func(*http.Request) (string, string, error) { return "partner", "k", selErr }, selErr},
		{"huge unknown name", func(*http.Request) (string, string, error) { return strings.Repeat("x", 1<<20), "k", nil }, addrlimit.ErrUnknownPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []addrlimit.Decision
			lim := mustNew(t, 1, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 100, Interval: time.Hour / 100}}}), addrlimit.WithPolicySelector(tc.sel),
				addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { seen = append(seen, d) }))
			got := codes(lim.Handler(okHandler), 3, func() *http.Request { return req("192.0.2.1:1") })
			assert.Equal(t, []int{200, 429, 429}, got, "charged to the default policy under the address")
			for _, d := range seen {
				require.ErrorIs(t, d.Err, tc.wantErr)
				assert.Equal(t, "default", d.Policy)
				assert.Equal(t, "192.0.2.1", d.Key)
				assert.Less(t, len(d.Err.Error()), 200, "an error text stays small whatever the selector returned")
			}
		})
	}
}

func TestNamedPolicyWithoutKeyUsesTheKeyFunc(t *testing.T) {
	lim := mustNew(t, 1, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "uploads", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Hour / 3}}}),
		addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
			if r.Method == http.MethodPost {
				return "uploads", "", nil
			}
			return "", "", nil
		}))
	post := func() *http.Request { r := req("192.0.2.1:1"); r.Method = http.MethodPost; return r }
	d := lim.Allow(post())
	assert.Equal(t, "uploads", d.Policy)
	assert.Equal(t, "192.0.2.1", d.Key)
	assert.Equal(t, 2, d.Remaining)
	assert.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.1:1")).Outcome, "the default policy has its own bucket for the address")
	assert.Equal(t, addrlimit.Allowed, lim.AllowKey(context.Background(), "uploads", "192.0.2.1", 2).Outcome)
	assert.Equal(t, addrlimit.Limited, lim.Allow(post()).Outcome)
}

func TestPolicySelectorKeyUnderTheDefaultPolicy(t *testing.T) {
	// ("", key): the default policy, keyed by the selector's key.
	lim := mustNew(t, 1, time.Hour, addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
		if u := r.Header.Get("X-Verified-User"); u != "" {
			return "", "user:" + u, nil
		}
		return "", "", nil
	}))
	d := lim.Allow(req("192.0.2.1:1", "X-Verified-User", "192.0.2.9"))
	assert.Equal(t, "user:192.0.2.9", d.Key)
	assert.Equal(t, "default", d.Policy)
	assert.Equal(t, addrlimit.Limited, lim.Allow(req("198.51.100.1:1", "X-Verified-User", "192.0.2.9")).Outcome, "the user's bucket, from any address")
	assert.Equal(t, addrlimit.Allowed, lim.Allow(req("192.0.2.9:1")).Outcome, "a prefixed user key never meets the address bucket of the same text")
}

func TestEnumStrings(t *testing.T) {
	for s, want := range map[addrlimit.HeaderStyle]string{
		addrlimit.HeaderDraft: "draft", addrlimit.HeaderXRateLimit: "x-ratelimit", addrlimit.HeaderNone: "none", 9: "HeaderStyle(9)",
	} {
		assert.Equal(t, want, s.String())
		assert.Equal(t, want, fmt.Sprint(s), "fmt uses String")
	}
}

// A named policy has a burst of its own, and the header fields advertise the
// burst, not the rate: 60 per minute in bursts of 10 sends q=10;w=10.
func TestNamedPolicyHasItsOwnBurst(t *testing.T) {
	lim := mustNew(t, 2, time.Hour,
		addrlimit.WithPolicy(addrlimit.Policy{Name: "partner", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Minute / 60}}}),
		addrlimit.WithPolicySelector(byPartner))
	h := lim.Handler(okHandler)
	got := codes(h, 11, func() *http.Request { return req("10.0.0.1:1", "X-Partner-Key", "pk-acme-0123456789") })
	assert.Equal(t, 10, count(got, 200), "a full bucket lets the burst through at once")
	assert.Equal(t, http.StatusTooManyRequests, got[10])
	w := serve(h, req("10.0.0.1:1", "X-Partner-Key", "pk-acme-0123456789"))
	assert.Equal(t, `"partner";q=10;w=10`, w.Header().Get("RateLimit-Policy"))
}

// Validate is the rule WithPolicy applies, so a Store can apply it too: it
// refuses what New refuses, naming the problem, and accepts every policy of a
// Limiter.
func TestPolicyValidateIsTheRuleOfNew(t *testing.T) {
	for _, tc := range []struct {
		p    addrlimit.Policy
		want string
	}{
		{addrlimit.Policy{Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}, "policy name is empty"},
		{addrlimit.Policy{Name: "a b", Limits: []addrlimit.Limit{{Burst: 1, Interval: time.Second}}}, "outside A-Z"},
		{addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Interval: time.Second}}}, `policy "p": burst must be at least 1`},
		{addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 1}}}, `policy "p": interval must be positive`},
		{addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 1 << 40, Interval: time.Hour}}}, `policy "p": burst times refill interval overflows`},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.p, err, tc.want)
		}
		if _, newErr := addrlimit.New(1, time.Second, addrlimit.WithPolicy(tc.p)); newErr == nil || newErr.Error() != err.Error() {
			t.Errorf("New with %+v: %v, want Validate's error", tc.p, newErr)
		}
	}
	lim := mustNew(t, 60, time.Minute, addrlimit.WithBurst(10), addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{{Burst: 3, Interval: time.Second}}}))
	for _, p := range lim.Policies() {
		assert.NoError(t, p.Validate())
	}
}

// Policies returns a copy: changing it changes nothing in the Limiter.
func TestPoliciesReturnsACopy(t *testing.T) {
	lim := mustNew(t, 10, time.Minute)
	ps := lim.Policies()
	ps[0].Limits[0].Burst, ps[0].Name = 1000, "changed"
	if got := lim.Policies()[0]; got.Limits[0].Burst != 10 || got.Name != addrlimit.DefaultPolicyName {
		t.Fatalf("policy after changing the copy: %+v", got)
	}
	if d := lim.AllowKey(context.Background(), "", "k", 11); d.Outcome != addrlimit.Limited {
		t.Fatalf("a cost of 11 over the burst of 10: %+v", d)
	}
}
