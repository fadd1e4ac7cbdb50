package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/require"
)

// frozen is a clock that never moves: no bucket refills, so every token
// spent is still spent at the end and counts are exact.
func frozen() func() time.Time {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	return func() time.Time { return t0 }
}

func peekRemaining(t *testing.T, lim *addrlimit.Limiter, policy, key string) int {
	t.Helper()
	d, err := lim.Peek(context.Background(), policy, key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// A client that spent 250 of 300 keeps them spent when
// the limit becomes 400 (150 left, not a fresh 400), and has none left when
// it becomes 100. Before SetPolicies the only way to change a limit was a
// new Limiter: a fresh bucket of the new burst.
func TestSetPoliciesKeepsTokensSpent(t *testing.T) {
	ctx := context.Background()
	lim := mustNew(t, 300, time.Minute, addrlimit.WithClock(frozen()))
	for range 250 {
		if d := lim.AllowKey(ctx, "", "client", 1); d.Outcome != addrlimit.Allowed {
			t.Fatalf("request below the limit: %v", d.Outcome)
		}
	}
	for _, tc := range []struct {
		limit, want int
	}{{400, 150}, {100, 0}, {300, 200}, {1000, 900}} { // at 100, only 100 stay spent
		p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: tc.limit, Interval: time.Minute / time.Duration(tc.limit)}}}
		if err := lim.SetPolicies(p); err != nil {
			t.Fatal(err)
		}
		if got := peekRemaining(t, lim, "", "client"); got != tc.want {
			t.Errorf("after the limit became %d/min: %d tokens left, want %d (250 spent, at most the burst)", tc.limit, got, tc.want)
		}
		if got, want := lim.Policies()[0].Limits[0].Burst, tc.limit; got != want {
			t.Errorf("Policies reports burst %d, want %d", got, want)
		}
	}
	d := lim.AllowKey(ctx, "", "client", 1)
	if d.Outcome != addrlimit.Allowed || d.Remaining != 899 {
		t.Errorf("after the changes: %v with %d left, want allowed with 899", d.Outcome, d.Remaining)
	}
	if s := lim.Stats(); s.Allowed != 251 || s.Policies[0].Allowed != 251 {
		t.Errorf("Stats.Allowed = %d (policy %d), want 251: counters carry over", s.Allowed, s.Policies[0].Allowed)
	}
}

// Limits pair by name, then in order: an added limit starts full, a
// removed one is dropped; named policies keep their buckets by name, and a
// name that disappears takes its buckets with it.
func TestSetPoliciesPairsLimitsAndPolicies(t *testing.T) {
	ctx := context.Background()
	perMin := addrlimit.Limit{Name: "minute", Burst: 300, Interval: time.Minute / 300}
	perSec := addrlimit.Limit{Name: "second", Burst: 10, Interval: time.Second / 10}
	api := addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{perMin}}
	lim := mustNew(t, 100, time.Minute, addrlimit.WithClock(frozen()), addrlimit.WithPolicy(api))
	def := lim.Policies()[0]
	lim.AllowKey(ctx, "api", "k", 8)
	lim.AllowKey(ctx, "", "k", 5)

	// Add a per-second limit before the per-minute one.
	api2 := addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{perSec, perMin}}
	if err := lim.SetPolicies(def, api2); err != nil {
		t.Fatal(err)
	}
	d, err := lim.Peek(ctx, "api", "k")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for l := range d.Limits() {
		got[l.Name] = l.Remaining
	}
	if got["minute"] != 292 || got["second"] != 10 {
		t.Errorf("after adding a limit: %v, want minute 292 (kept) and second 10 (new, full)", got)
	}
	if r := peekRemaining(t, lim, "", "k"); r != 95 {
		t.Errorf("default policy: %d left, want 95 (unchanged policy)", r)
	}

	// Remove the minute limit: the second keeps its state.
	lim.AllowKey(ctx, "api", "k", 3)
	if err := lim.SetPolicies(def, addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{perSec}}); err != nil {
		t.Fatal(err)
	}
	if r := peekRemaining(t, lim, "api", "k"); r != 7 {
		t.Errorf("after removing a limit: %d left, want 7", r)
	}

	// Drop the policy: its name now falls back to the default policy.
	if err := lim.SetPolicies(def); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Peek(ctx, "api", "k"); !errors.Is(err, addrlimit.ErrUnknownPolicy) {
		t.Errorf("Peek of a removed policy: %v, want ErrUnknownPolicy", err)
	}
	if d := lim.AllowKey(ctx, "api", "k", 1); !errors.Is(d.Err, addrlimit.ErrUnknownPolicy) || d.Policy != "default" || d.Remaining != 94 {
		t.Errorf("a request for the removed policy: policy %q, err %v, %d left; want the default policy's 94", d.Policy, d.Err, d.Remaining)
	}
	// Back again, it starts with full buckets.
	if err := lim.SetPolicies(def, api); err != nil {
		t.Fatal(err)
	}
	if r := peekRemaining(t, lim, "api", "k"); r != 300 {
		t.Errorf("a policy that came back: %d left, want a full 300", r)
	}
}

// An invalid set is refused with an error naming the problem, and the
// limiter keeps its policies and buckets.
func TestSetPoliciesRefusesInvalid(t *testing.T) {
	ctx := context.Background()
	lim := mustNew(t, 10, time.Minute, addrlimit.WithClock(frozen()), addrlimit.WithPolicy(addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Second}}}))
	lim.AllowKey(ctx, "", "k", 4)
	before := lim.Policies()
	ok := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 20, Interval: time.Second}}}
	for _, tc := range []struct {
		name string
		ps   []addrlimit.Policy
		want string
	}{
		{"none", nil, "needs at least the default policy"},
		{"zero burst", []addrlimit.Policy{ok, {Name: "api", Limits: []addrlimit.Limit{{Burst: 0, Interval: time.Second}}}}, `policy "api": burst must be at least 1, got 0`},
		{"no limit", []addrlimit.Policy{{Name: "default"}}, `policy "default": has no limit`},
		{"bad name", []addrlimit.Policy{ok, {Name: "a b", Limits: ok.Limits}}, `"a b"`},
		{"duplicate", []addrlimit.Policy{ok, {Name: "default", Limits: ok.Limits}}, `two policies are named "default"`},
	} {
		err := lim.SetPolicies(tc.ps...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "addrlimit: ") {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if got := fmt.Sprint(lim.Policies()); got != fmt.Sprint(before) {
		t.Errorf("policies after refused changes: %s, want %v", got, before)
	}
	if r := peekRemaining(t, lim, "", "k"); r != 6 {
		t.Errorf("bucket after refused changes: %d left, want 6", r)
	}
}

// The proof: the configuration (policies, alternating between shapes that
// change burst, interval and the number of limits, and the internal
// token) is replaced every 1,000 requests of each of four workers, while
// they run on every core: no decision fails or is refused, and at the end
// every key's bucket holds exactly the tokens its requests spent (the
// clock is frozen, so nothing refills: one bucket lost or charged twice
// would show). Run with -race.
func TestReconfigureUnderLoad(t *testing.T) {
	const (
		workers   = 4
		perWorker = 25_000
		every     = 1_000 // a change every this many requests of a worker
		keys      = 16
	)
	shapes := [][]addrlimit.Limit{
		{{Burst: 100_000, Interval: time.Millisecond}},
		{{Burst: 200_000, Interval: 2 * time.Millisecond}},
		{{Burst: 150_000, Interval: time.Millisecond}, {Name: "hour", Burst: 1_000_000, Interval: time.Hour / 1_000_000}},
	}
	policies := func(i int) []addrlimit.Policy {
		return []addrlimit.Policy{
			{Name: "default", Limits: shapes[i%len(shapes)]},
			{Name: "api", Limits: shapes[(i+1)%len(shapes)]},
		}
	}
	const kept, dropped, gate = "kept-secret-0123456789", "rotated-secret-0123456789", "gate-secret-0123456789"
	tokA, err := addrlimit.NewIdentities(addrlimit.Identity{Name: "edge", Secrets: []string{kept, dropped}})
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := addrlimit.NewIdentities(addrlimit.Identity{Name: "gate", Secrets: []string{gate}}, addrlimit.Identity{Name: "edge", Secrets: []string{kept}})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := addrlimit.NewIdentities(addrlimit.Identity{Name: "edge", Secrets: []string{kept, dropped}})
	lim := mustNew(t, 1, time.Second, addrlimit.WithClock(frozen()), addrlimit.WithInternalToken(tok))
	if err := lim.SetPolicies(policies(0)...); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int64
	change := func() error {
		i := int(changes.Add(1))
		if err := lim.SetPolicies(policies(i)...); err != nil {
			return err
		}
		return tok.Replace([]*addrlimit.InternalToken{tokA, tokB}[i%2])
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	var charged [keys]atomic.Int64 // per key, under the default policy (api: +keys)
	var apiCharged [keys]atomic.Int64
	for w := range workers {
		wg.Go(func() {
			keep := req("192.0.2.1:1", "Authorization", "Bearer "+kept)
			for i := range perWorker {
				if i%every == every-1 {
					if err := change(); err != nil {
						errs <- err
						return
					}
				}
				k := (w*perWorker + i) % keys
				policy := ""
				if i%3 == 0 {
					policy = "api"
				}
				d := lim.AllowKey(context.Background(), policy, fmt.Sprint("key-", k), 1)
				if d.Outcome != addrlimit.Allowed || d.Err != nil || d.QuotaUnknown {
					errs <- fmt.Errorf("request %d of worker %d: %v, err %v", i, w, d.Outcome, d.Err)
					return
				}
				if policy == "" {
					charged[k].Add(1)
				} else {
					apiCharged[k].Add(1)
				}
				if i%50 == 0 { // the secret both sets accept is always exempt, as edge
					if d := lim.Allow(keep); d.Outcome != addrlimit.Exempt || d.Identity != "edge" {
						errs <- fmt.Errorf("request %d of worker %d with the kept secret: %v as %q", i, w, d.Outcome, d.Identity)
						return
					}
				}
				if i%5000 == 0 {
					lim.Stats() // moves shards too, concurrently
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := int(changes.Load())
	if want := workers * perWorker / every; n != want {
		t.Fatalf("%d changes, want %d", n, want)
	}
	final := policies(n)
	for k := range keys {
		for _, c := range []struct {
			policy string
			p      addrlimit.Policy
			spent  int64
		}{{"", final[0], charged[k].Load()}, {"api", final[1], apiCharged[k].Load()}} {
			d, err := lim.Peek(context.Background(), c.policy, fmt.Sprint("key-", k))
			if err != nil {
				t.Fatal(err)
			}
			// The first limit has carried every token spent; the "hour"
			// limit was dropped and added again (full) by the changes.
			i := 0
			for l := range d.Limits() {
				want := c.p.Limits[i].Burst - int(c.spent)
				if i == 0 && l.Remaining != want || i > 0 && (l.Remaining < want || l.Remaining > l.Burst) {
					t.Errorf("key-%d under %q, limit %s: %d left, want %d (%d spent)", k, c.policy, l.Name, l.Remaining, want, c.spent)
				}
				i++
			}
			if i != len(c.p.Limits) {
				t.Errorf("key-%d under %q: %d limits, want %d", k, c.policy, i, len(c.p.Limits))
			}
		}
	}
	s := lim.Stats()
	if want := uint64(workers * perWorker); s.Allowed != want || s.Limited != 0 || s.KeyErrors != 0 {
		t.Errorf("Stats: %d allowed, %d limited, %d key errors; want %d, 0, 0", s.Allowed, s.Limited, s.KeyErrors, want)
	}
	exempt := uint64(workers * perWorker / 50)
	for _, id := range s.Identities {
		if id.Name == "edge" && id.Exempt != exempt || s.Exempt != exempt {
			t.Errorf("Stats: %d exempt, edge %d; want %d: a count lost across Replace", s.Exempt, id.Exempt, exempt)
		}
	}
	t.Logf("%d requests and %d exempt ones on %d cores in %v (%.0f/s), %d changes of the policies and the token", workers*perWorker, s.Exempt, runtime.GOMAXPROCS(0), elapsed.Round(time.Millisecond), float64(workers*perWorker+int(s.Exempt))/elapsed.Seconds(), n)
}

// InternalToken.Replace changes what the token accepts for the Limiter and
// for Require at once; the per-identity counters follow the names.
func TestInternalTokenReplace(t *testing.T) {
	const edgeOld, edgeNew, gate = "edge-secret-old-0123456789", "edge-secret-new-0123456789", "gate-secret-0123456789abc"
	tok, err := addrlimit.NewIdentities(addrlimit.Identity{Name: "edge", Secrets: []string{edgeOld}})
	if err != nil {
		t.Fatal(err)
	}
	lim := mustNew(t, 1, time.Minute, addrlimit.WithInternalToken(tok))
	guard := tok.Require(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	status := func(secret string) (addrlimit.Outcome, string, int) {
		r := req("192.0.2.7:1", "Authorization", "Bearer "+secret)
		d := lim.Allow(r)
		w := httptest.NewRecorder()
		guard.ServeHTTP(w, r)
		return d.Outcome, d.Identity, w.Code
	}
	status(edgeOld)
	next, err := addrlimit.NewIdentities(
		addrlimit.Identity{Name: "edge", Secrets: []string{edgeNew}, Retired: []string{edgeOld}},
		addrlimit.Identity{Name: "gate", Secrets: []string{gate}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Replace(next); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		secret   string
		outcome  addrlimit.Outcome
		identity string
		code     int
	}{
		{edgeNew, addrlimit.Exempt, "edge", 200},
		{gate, addrlimit.Exempt, "gate", 200},
		{edgeOld, addrlimit.Allowed, "edge", 401}, // retired now: charged, flagged
		{edgeOld, addrlimit.Limited, "edge", 401},
	} {
		o, id, code := status(tc.secret)
		if o != tc.outcome || id != tc.identity || code != tc.code {
			t.Errorf("%s…: %v %q %d, want %v %q %d", tc.secret[:8], o, id, code, tc.outcome, tc.identity, tc.code)
		}
	}
	got := fmt.Sprint(lim.Stats().Identities)
	if want := "[{edge 2 1} {gate 1 0}]"; got != want {
		t.Errorf("Stats.Identities = %s, want %s (edge's count kept across Replace)", got, want)
	}
	for _, bad := range []*addrlimit.InternalToken{nil, {}} {
		if err := tok.Replace(bad); err == nil {
			t.Errorf("Replace(%v) succeeded, want an error", bad)
		}
	}
	if err := (&addrlimit.InternalToken{}).Replace(next); err == nil {
		t.Error("Replace on a zero token succeeded, want an error")
	}
}

// The recipe's poll loop, driven by an injected tick: a rotated secret
// (written as the kubelet does, by a symlink swap) and a changed policy
// file apply at the next tick; a bad file is refused once, with the running
// configuration kept, and not retried until its content changes.
func TestReloadRecipe(t *testing.T) {
	dir := t.TempDir()
	secrets, policies := filepath.Join(dir, "secrets"), filepath.Join(dir, "policies.json")
	const oldSecret, newSecret = "edge-secret-november-0001", "edge-secret-december-0002"
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeMountedSecret(secrets, map[string]string{"edge": oldSecret}); err != nil {
		t.Fatal(err)
	}
	write(policies, `{"policies": [{"name": "default", "limits": [{"requests": 5, "per": "1h"}]}]}`)
	tok, _ := addrlimit.NewInternalToken("placeholder-until-the-first-check")
	lim := mustNew(t, 1, time.Minute, addrlimit.WithInternalToken(tok), addrlimit.WithClock(frozen()))
	var logs strings.Builder
	r := &reloader{lim: lim, tok: tok, policyPath: policies, secretDir: secrets, log: slog.New(slog.NewTextHandler(&logs, nil))}
	tick, results := make(chan time.Time), make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx, tick, func(err error) { results <- err })
	poll := func() error { tick <- time.Time{}; return <-results }
	exempt := func(secret string) bool {
		return lim.Allow(req("192.0.2.1:1", "Authorization", "Bearer "+secret)).Outcome == addrlimit.Exempt
	}
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	lim.AllowKey(ctx, "", "k", 3)
	if !exempt(oldSecret) || lim.Policies()[0].Limits[0].Burst != 5 {
		t.Fatal("first poll did not apply the files")
	}

	if err := writeMountedSecret(secrets, map[string]string{"edge": newSecret}); err != nil {
		t.Fatal(err)
	}
	write(policies, `{"policies": [{"name": "default", "limits": [{"requests": 8, "per": "1h"}]}]}`)
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	if !exempt(newSecret) || exempt(oldSecret) {
		t.Errorf("after the swap: new secret exempt %v, old %v; want true, false", exempt(newSecret), exempt(oldSecret))
	}
	if got := peekRemaining(t, lim, "", "k"); got != 5 {
		t.Errorf("after 5/h became 8/h with 3 spent: %d left, want 5", got)
	}

	write(policies, `{"policies": [{"name": "default", "limits": [{"requests": 8, "per": "1h", "brust": 9}]}]}`)
	err := poll()
	if err == nil || !strings.Contains(err.Error(), `unknown field "brust"`) {
		t.Errorf("a misspelt field: %v, want the field named", err)
	}
	if err := poll(); err != nil {
		t.Errorf("the same bad file again: %v, want nothing new", err)
	}
	if err := writeMountedSecret(secrets, map[string]string{"edge": "tiny-secret1"}); err != nil {
		t.Fatal(err)
	}
	err = poll()
	if err == nil || !strings.Contains(err.Error(), "shorter than the minimum") || strings.Contains(err.Error(), "tiny-secret1") {
		t.Errorf("a short secret: %v, want it refused without the secret", err)
	}
	if !exempt(newSecret) || lim.Policies()[0].Limits[0].Burst != 8 || peekRemaining(t, lim, "", "k") != 5 {
		t.Error("a refused file changed the running configuration")
	}
	if a, f := r.Applied.Load(), r.Refused.Load(); a != 4 || f != 2 {
		t.Errorf("applied %d, refused %d; want 4, 2", a, f)
	}
	if n := strings.Count(logs.String(), "configuration refused"); n != 2 || strings.Contains(logs.String(), "tiny-secret1") {
		t.Errorf("%d refusal lines, want 2, and no secret:\n%s", n, logs.String())
	}
}

// TestSetPoliciesChangesTheInFlightLimit: a policy's in-flight limit
// changes on a running Limiter; the slots held go on counting against the
// new limit, its buckets keep the tokens spent, and refusals are charged
// nothing.
func TestSetPoliciesChangesTheInFlightLimit(t *testing.T) {
	ctx := t.Context()
	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithInFlight(2))
	require.NoError(t, err)
	limits := lim.Policies()[0].Limits
	set := func(n int) {
		t.Helper()
		require.NoError(t, lim.SetPolicies(addrlimit.Policy{Name: addrlimit.DefaultPolicyName, Limits: limits, InFlight: n}))
		require.Equal(t, n, lim.Policies()[0].InFlight)
	}
	take := func(want bool) addrlimit.Decision {
		t.Helper()
		d := lim.AllowKey(ctx, "", "192.0.2.1", 1)
		require.Equal(t, want, d.Outcome == addrlimit.Allowed, "decision %+v", d)
		require.Equal(t, want, d.HoldsSlot())
		require.Equal(t, !want, d.InFlightLimited)
		return d
	}
	a, b := take(true), take(true)
	take(false)
	set(3) // two held: one more
	c := take(true)
	take(false)
	require.Equal(t, 3, lim.Stats().Policies[0].InFlight)
	set(1) // three held, limit 1: refused until two are released
	lim.Release(ctx, a)
	take(false)
	lim.Release(ctx, b)
	lim.Release(ctx, c)
	d := take(true)
	take(false)
	lim.Release(ctx, d)
	set(0) // no in-flight limit: nothing held
	e := lim.AllowKey(ctx, "", "192.0.2.1", 1)
	require.Equal(t, addrlimit.Allowed, e.Outcome)
	require.False(t, e.HoldsSlot())
	require.Equal(t, 0, lim.Stats().Policies[0].InFlight)
	p, err := lim.Peek(ctx, "", "192.0.2.1")
	require.NoError(t, err)
	require.Equal(t, 300-5, p.Remaining, "five allowed; the refused were given their tokens back")
}
