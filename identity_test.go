package addrlimit_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	edgeSecret    = "edge-secret-2026-0123456789abcdef"
	edgeNext      = "edge-secret-2027-0123456789abcdef"
	edgeOld       = "edge-secret-2025-0123456789abcdef"
	gateSecret    = "gate-secret-2026-0123456789abcdef"
	otherDeploySS = "staging-edge-secret-0123456789abc" // valid, but of another deployment
)

func identities(t testing.TB) *addrlimit.InternalToken {
	t.Helper()
	tok, err := addrlimit.NewIdentities(
		addrlimit.Identity{Name: "edge", Secrets: []string{edgeSecret, edgeNext}, Retired: []string{edgeOld}},
		addrlimit.Identity{Name: "preview-gate", Secrets: []string{gateSecret}},
	)
	require.NoError(t, err)
	return tok
}

// Exempt requests are counted per identity over real HTTP; a forged token
// and another deployment's secret get no pass; the retired-secret alarm
// names the identity.
func TestNamedIdentitiesOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var decisions []addrlimit.Decision
	var logged bytes.Buffer
	logObs, err := addrlimit.NewLogObserver(slog.New(slog.NewJSONHandler(&logged, nil)), time.Hour)
	require.NoError(t, err)
	lim := mustNew(t, 1, time.Hour, addrlimit.WithInternalToken(identities(t)), addrlimit.WithObserver(logObs.Observe),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			mu.Lock()
			decisions = append(decisions, d)
			mu.Unlock()
		}))
	srv := httptest.NewServer(lim.Handler(okHandler))
	defer srv.Close()
	get := func(secret string) int {
		r, err := http.NewRequest("GET", srv.URL+"/api", nil)
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bearer "+secret)
		resp, err := srv.Client().Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	var got []int
	for _, s := range []string{edgeSecret, edgeSecret, edgeNext, gateSecret, edgeSecret, "forged-forged-forged-forged", otherDeploySS, edgeOld, edgeOld} {
		got = append(got, get(s))
	}
	// One token an hour for 127.0.0.1: the forged token spends it, then
	// everything that is not exempt is refused.
	assert.Equal(t, "[200 200 200 200 200 200 429 429 429]", fmt.Sprint(got))

	s := lim.Stats()
	require.Zero(t, s.StoreErrors)
	assert.Equal(t, []addrlimit.IdentityStats{
		{Name: "edge", Exempt: 4, RetiredTokenLimited: 2},
		{Name: "preview-gate", Exempt: 1},
	}, s.Identities)
	assert.Equal(t, uint64(5), s.Exempt)
	assert.Equal(t, uint64(2), s.RetiredTokenLimited)

	mu.Lock()
	var ids []string
	for _, d := range decisions {
		ids = append(ids, d.Outcome.String()+":"+d.Identity)
	}
	mu.Unlock()
	assert.Equal(t, "[exempt:edge exempt:edge exempt:edge exempt:preview-gate exempt:edge allowed: limited: limited:edge limited:edge]", fmt.Sprint(ids))

	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	var alarms []string
	for _, l := range lines {
		if strings.Contains(l, `"level":"ERROR"`) {
			alarms = append(alarms, l)
		}
	}
	require.Len(t, alarms, 1, "one alarm line per key per interval: %s", logged.String())
	assert.Contains(t, alarms[0], `"identity":"edge"`)
	assert.Contains(t, alarms[0], `"retired_token":true`)
	for _, s := range []string{edgeSecret, edgeNext, edgeOld, gateSecret, otherDeploySS} {
		assert.NotContains(t, logged.String(), s)
	}
	assert.NotContains(t, lines[0], "identity", "the other deployment's secret names no identity")
}

// Anonymous secrets (NewInternalToken, WithRetired) carry no identity and
// add no per-identity figures.
func TestAnonymousSecretsHaveNoIdentity(t *testing.T) {
	tok, err := identities(t).WithRetired(retiredSecret)
	require.NoError(t, err)
	var last addrlimit.Decision
	lim := mustNew(t, 1, time.Hour, addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) { last = d }))
	h := lim.Handler(okHandler)
	assert.Equal(t, "[200 429]", fmt.Sprint(codes(h, 2, func() *http.Request { return req("10.0.0.1:1", "Authorization", "Bearer "+retiredSecret) })))
	assert.True(t, last.RetiredToken)
	assert.Empty(t, last.Identity)
	s := lim.Stats()
	assert.Equal(t, uint64(1), s.RetiredTokenLimited)
	assert.Equal(t, []addrlimit.IdentityStats{{Name: "edge"}, {Name: "preview-gate"}}, s.Identities)

	plain := mustNew(t, 1, time.Hour, addrlimit.WithInternalToken(mustToken(t, secret)))
	assert.Equal(t, 200, serve(plain.Handler(okHandler), req("10.0.0.1:1", "Authorization", "Bearer "+secret)).Code)
	assert.Nil(t, plain.Stats().Identities)
	assert.Equal(t, uint64(1), plain.Stats().Exempt)
}

func TestNewIdentitiesErrors(t *testing.T) {
	many := make([]addrlimit.Identity, addrlimit.MaxIdentities+1)
	for i := range many {
		many[i] = addrlimit.Identity{Name: fmt.Sprint("svc", i), Secrets: []string{fmt.Sprintf("secret-of-service-%04d-0123456789", i)}}
	}
	id := func(name string, secrets ...string) addrlimit.Identity {
		return addrlimit.Identity{Name: name, Secrets: secrets}
	}
	for _, tc := range []struct {
		name string
		ids  []addrlimit.Identity
		want string
	}{
		{"none", nil, "NewIdentities needs at least one identity"},
		{"too many", many, "65 identities, more than the maximum of 64"},
		{"empty name", []addrlimit.Identity{id("edge", edgeSecret), id("", gateSecret)}, "identity 2 of 2: name is empty"},
		{"bad name", []addrlimit.Identity{id("edge proxy", edgeSecret)}, `identity 1 of 1: name "edge proxy" has a character outside A-Z a-z 0-9 . _ -`},
		{"long name", []addrlimit.Identity{id(strings.Repeat("e", 65), edgeSecret)}, "identity 1 of 1: name is 65 bytes, longer than the maximum of 64"},
		{"same name", []addrlimit.Identity{id("edge", edgeSecret), id("edge", gateSecret)}, `two identities are named "edge"`},
		{"no secret", []addrlimit.Identity{id("edge")}, `identity "edge" has no secret`},
		{"short secret", []addrlimit.Identity{id("edge", edgeSecret), id("gate", "short")}, `internal token identity "gate" secret 1 of 1 is 5 bytes`},
		{"shared secret", []addrlimit.Identity{id("edge", edgeNext, edgeSecret), id("gate", edgeSecret)}, `identity "gate" secret 1 is the same secret as identity "edge" secret 2`},
		{"retired elsewhere", []addrlimit.Identity{id("edge", edgeSecret), {Name: "gate", Secrets: []string{gateSecret}, Retired: []string{edgeSecret}}}, `identity "gate" retired secret 1 is the same secret as identity "edge" secret 1`},
		{"twice in one", []addrlimit.Identity{id("edge", edgeSecret, edgeSecret)}, `identity "edge" secret 2 is the same secret as identity "edge" secret 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := addrlimit.NewIdentities(tc.ids...)
			assert.Nil(t, tok)
			requirePackageError(t, err, tc.want)
			assert.Empty(t, secretMaterial(err.Error(), edgeSecret, edgeNext, gateSecret))
		})
	}
	_, err := identities(t).WithRetired(edgeOld)
	requirePackageError(t, err, `retired secret 1 of 1 is also a retired secret of identity "edge"`)
	_, err = identities(t).WithRetired(gateSecret)
	requirePackageError(t, err, "retired secret 1 of 1 is also an accepted secret")
}

// classify compares the token with every secret of every identity, however
// many match and wherever the match is: the work does not tell which.
func TestClassifyComparesEverySecret(t *testing.T) {
	tok, err := identities(t).WithRetired(retiredSecret)
	require.NoError(t, err)
	const all = 5 // 3 accepted, 2 retired
	for _, s := range []string{edgeSecret, edgeNext, gateSecret, edgeOld, retiredSecret, otherDeploySS} {
		stop := addrlimit.CountDigestComparisons()
		tok.Match(req("10.0.0.1:1", "Authorization", "Bearer "+s))
		assert.Equal(t, all, stop(), "token %.8s…", s)
	}
}

// Printing a token with identities shows the names and the counts, never a
// secret or a digest: fmt's verbs, slog, and testify's diff.
func TestIdentitiesPrintNoSecretMaterial(t *testing.T) {
	tok, err := identities(t).WithRetired(retiredSecret)
	require.NoError(t, err)
	secrets := []string{edgeSecret, edgeNext, edgeOld, gateSecret, retiredSecret}
	const want = "InternalToken(3 secrets, 2 retired; identities edge, preview-gate)"
	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
		outputs = append(outputs, fmt.Sprintf(verb, tok), fmt.Sprintf(verb, *tok))
	}
	for i, out := range outputs {
		assert.Contains(t, out, want, "output %d", i)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "token", tok)
	assert.Contains(t, logged.String(), want)
	type config struct {
		Token *addrlimit.InternalToken
		Name  string
	}
	var f failures
	assert.Equal(&f, config{tok, "a"}, config{tok, "b"})
	assert.Contains(t, f.out.String(), "preview-gate", "the diff shows the names")
	for i, out := range append(outputs, logged.String(), f.out.String()) {
		if leak := secretMaterial(out, secrets...); leak != "" {
			t.Errorf("output %d: %s: %s", i, leak, out)
		}
	}
}

// BenchmarkExempt measures an exempt request through Handler with one
// anonymous secret and with the identities of identities() (3 secrets, 1
// retired), the last-configured secret matching.
func BenchmarkExempt(b *testing.B) {
	for _, tc := range []struct {
		name   string
		tok    *addrlimit.InternalToken
		secret string
	}{
		{"anonymous", mustToken(b, secret), secret},
		{"identities", identities(b), gateSecret},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := mustNew(b, 1, time.Hour, addrlimit.WithInternalToken(tc.tok)).Handler(okHandler)
			r := req("10.0.0.1:1", "Authorization", "Bearer "+tc.secret)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// Decide (grpclimit's path) names the identity from Call.Authorization.
func TestDecideNamesTheIdentity(t *testing.T) {
	lim := mustNew(t, 1, time.Hour, addrlimit.WithInternalToken(identities(t)))
	ctx := context.Background()
	call := func(secret string) addrlimit.Call {
		return addrlimit.Call{Addr: netipAddr("192.0.2.1"), Authorization: []string{"Bearer " + secret}, Route: "/svc/Method"}
	}
	d := lim.Decide(ctx, call(gateSecret))
	assert.Equal(t, addrlimit.Exempt, d.Outcome)
	assert.Equal(t, "preview-gate", d.Identity)
	d = lim.Decide(ctx, call(edgeOld))
	assert.Equal(t, "allowed edge true", fmt.Sprint(d.Outcome, " ", d.Identity, " ", d.RetiredToken))
	d = lim.Decide(ctx, call(edgeOld))
	assert.Equal(t, "limited edge true", fmt.Sprint(d.Outcome, " ", d.Identity, " ", d.RetiredToken))
	d = lim.Decide(ctx, call(otherDeploySS))
	assert.Equal(t, "limited  false", fmt.Sprint(d.Outcome, " ", d.Identity, " ", d.RetiredToken))
	assert.Equal(t, []addrlimit.IdentityStats{{Name: "edge", RetiredTokenLimited: 1}, {Name: "preview-gate", Exempt: 1}}, lim.Stats().Identities)
}
