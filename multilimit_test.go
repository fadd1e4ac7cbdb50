package addrlimit_test

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/addrlimit/addrlimit"
)

// multiRef is the reference for one key of a policy of several limits: one
// golang.org/x/time/rate.Limiter per limit, charged all or nothing. It
// never cancels a reservation (golang/go#69419: CancelAt restores wrong
// amounts): it reads every limiter's tokens first (TokensAt) and reserves
// on all of them only when all hold the cost.
type multiRef struct {
	limits []addrlimit.Limit
	lims   []*rate.Limiter
}

func newMultiRef(limits []addrlimit.Limit) *multiRef {
	r := &multiRef{limits: limits}
	for _, l := range limits {
		r.lims = append(r.lims, rate.NewLimiter(rate.Every(l.Interval), l.Burst))
	}
	return r
}

// tie reports whether x/time/rate's float64 token count x lies so close to
// the whole number n that its rounding may put it on either side (float
// error, or a wait truncated to whole nanoseconds: 1 ns of tokens).
func tie(x float64, n int, interval time.Duration) bool {
	return math.Abs(x-float64(n)) < max(1e-6, 2/float64(interval))
}

// take decides a request of n tokens at at: allowed if every limit holds
// n, and then charged to each. ambiguous reports a tie on some limit, where
// the reference's rounding decides, not the rule.
func (r *multiRef) take(t *testing.T, at time.Time, n int) (allowed, ambiguous bool, tokens []float64) {
	allowed = true
	for i, lim := range r.lims {
		tok := lim.TokensAt(at)
		tokens = append(tokens, tok)
		// A full limiter holds exactly its burst: no rounding there.
		ambiguous = ambiguous || tok < float64(r.limits[i].Burst) && tie(tok, n, r.limits[i].Interval)
		allowed = allowed && tok >= float64(n)
	}
	if !allowed {
		return false, ambiguous, tokens
	}
	for i, lim := range r.lims {
		if res := lim.ReserveN(at, n); !res.OK() || res.DelayFrom(at) != 0 {
			t.Fatalf("limit %d: a reservation of %d with %.9f tokens must not wait", i, n, tokens[i])
		}
	}
	return true, ambiguous, tokens
}

// sync makes the reference hold, at at, what the limiter's decision d says
// each limit holds: after a tie, where the two may have gone different
// ways by rounding alone. x/time/rate cannot add tokens, so each limiter is
// rebuilt: full at an earlier instant, charged the whole tokens missing.
func (r *multiRef) sync(t *testing.T, at time.Time, d addrlimit.Decision) {
	i := 0
	for s := range d.Limits() {
		tokens := float64(s.Burst) - float64(s.ResetAfter)/float64(s.Interval)
		tokens = max(tokens, 0)
		whole := math.Floor(tokens)
		frac := time.Duration(math.Round((tokens - whole) * float64(s.Interval)))
		lim := rate.NewLimiter(rate.Every(s.Interval), s.Burst)
		if !lim.AllowN(at.Add(-frac), s.Burst-int(whole)) {
			t.Fatalf("rebuilding limit %d with %.9f tokens failed", i, tokens)
		}
		r.lims[i] = lim
		i++
	}
}

// TestSeveralLimitsMatchXTimeRate drives 10^6 requests of random costs at
// random instants through policies of three limits, on three keys, and
// compares every decision with one x/time/rate limiter per limit charged
// all or nothing: the same decisions; after a denial, every limit holds
// what it held before (nothing charged); the denial's RetryAfter is the
// longest wait among the limits (within 1 µs of x/time/rate's float
// arithmetic). Ties that x/time/rate's rounding decides are counted and
// resynchronised, and must stay rare.
func TestSeveralLimitsMatchXTimeRate(t *testing.T) {
	const (
		requests = 1_000_000
		policies = 10
		keys     = 3
	)
	rng := rand.New(rand.NewPCG(25, 2))
	base := time.Unix(1_700_000_000, 0)
	var decided, denied, ties, deniedByLater int
	for pi := range policies {
		// A short limit, a longer one and a long one, each binding at
		// times: b1 per i1, then bursts and windows a few times larger.
		b1 := 2 + rng.IntN(9)
		i1 := time.Duration(1+rng.IntN(50))*time.Millisecond + time.Duration(rng.IntN(1000))
		b2 := b1 * (2 + rng.IntN(5))
		i2 := i1*time.Duration(2+rng.IntN(6)) + time.Duration(rng.IntN(1000))
		b3 := b2 * (2 + rng.IntN(3))
		i3 := i2*time.Duration(2+rng.IntN(4)) + time.Duration(rng.IntN(1000))
		limits := []addrlimit.Limit{
			{Name: "short", Burst: b1, Interval: i1},
			{Name: "mid", Burst: b2, Interval: i2},
			{Name: "long", Burst: b3, Interval: i3},
		}
		now := base
		lim, err := addrlimit.New(1, time.Hour, addrlimit.WithClock(func() time.Time { return now }),
			addrlimit.WithPolicy(addrlimit.Policy{Name: "p", Limits: limits}))
		if err != nil {
			t.Fatal(err)
		}
		refs := make([]*multiRef, keys)
		for k := range refs {
			refs[k] = newMultiRef(limits)
		}
		for range requests / policies {
			// Mean gap: a third of the short interval, so that every limit
			// runs dry in turn; now and then a long pause.
			gap := time.Duration(rng.Int64N(int64(i1) * 2 / 3))
			if rng.IntN(1000) == 0 {
				gap = time.Duration(rng.Int64N(int64(i3) * int64(b3)))
			}
			now = now.Add(gap)
			n := 1
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(b1)
			}
			k := rng.IntN(keys)
			key := string(rune('a' + k))
			want, ambiguous, tokens := refs[k].take(t, now, n)
			d := lim.AllowKey(context.Background(), "p", key, n)
			decided++
			got := d.Outcome == addrlimit.Allowed
			if ambiguous {
				ties++
				refs[k].sync(t, now, d)
				continue
			}
			if got != want {
				t.Fatalf("policy %d %+v, request %d at %v, key %s, cost %d: allowed=%v, x/time/rate allowed=%v with tokens %.6f",
					pi, limits, decided, now.Sub(base), key, n, got, want, tokens)
			}
			if got {
				continue
			}
			denied++
			var longest time.Duration
			i := 0
			for s := range d.Limits() {
				if s.Remaining != int(math.Floor(tokens[i])) {
					t.Fatalf("policy %d, request %d: denied, yet limit %s holds %d tokens, x/time/rate %.6f: a denial charged it",
						pi, decided, s.Name, s.Remaining, tokens[i])
				}
				wait := time.Duration(math.Max(0, float64(n)-tokens[i]) * float64(limits[i].Interval))
				longest = max(longest, wait)
				i++
			}
			if diff := d.RetryAfter - longest; diff < -time.Microsecond || diff > time.Microsecond {
				t.Fatalf("policy %d, request %d: RetryAfter %v, the longest wait of x/time/rate's limits %v", pi, decided, d.RetryAfter, longest)
			}
			if d.Limit().Name != "short" {
				deniedByLater++
			}
		}
	}
	t.Logf("%d decisions, %d denied (%d by the mid or long limit), %d ties resynchronised", decided, denied, deniedByLater, ties)
	if denied < decided/10 || deniedByLater < denied/10 {
		t.Fatalf("%d of %d denied, %d by the longer limits: the sequence does not exercise every limit", denied, decided, deniedByLater)
	}
	if ties > decided/1000 {
		t.Fatalf("%d ties in %d decisions: the comparison says little", ties, decided)
	}
}

// A request that one limit denies charges none: the others keep their
// tokens, and Retry-After is the longest wait among the denying limits.
func TestSeveralLimitsAllOrNothing(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim := mustNew(t, 10, time.Second, addrlimit.WithLimit(300, time.Minute), addrlimit.WithLimit(10000, 24*time.Hour),
		addrlimit.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	for i := range 10 {
		if d := lim.AllowKey(ctx, "", "k", 1); d.Outcome != addrlimit.Allowed {
			t.Fatalf("request %d: %+v", i+1, d)
		}
	}
	for range 5 {
		d := lim.AllowKey(ctx, "", "k", 1)
		if d.Outcome != addrlimit.Limited || d.Limit().Name != "1s" {
			t.Fatalf("11th request: %v by %q, want limited by the 1s limit", d.Outcome, d.Limit().Name)
		}
	}
	wantRemaining(t, lim, "after 10 allowed and 5 denied (denials charge nothing)", 0, 290, 9990)
	want := []addrlimit.LimitStats{{Name: "1s", Limited: 5}, {Name: "1m"}, {Name: "1d"}}
	if got := lim.Stats().Policies[0].Limits; !slices.Equal(got, want) {
		t.Fatalf("Stats by limit %v, want %v: the 1s limit denied 5", got, want)
	}
	// Refunds give back to every limit.
	now = now.Add(time.Second)
	lim.Refund(ctx, lim.AllowKey(ctx, "", "k", 3))
	wantRemaining(t, lim, "a second later, after 3 charged and refunded", 10, 295, 9990)
	// Reset makes every limit full.
	if err := lim.Reset(ctx, "", "k"); err != nil {
		t.Fatal(err)
	}
	wantRemaining(t, lim, "after Reset", 10, 300, 10000)
}

// wantRemaining checks the whole tokens of each limit of key k's buckets
// under lim's default policy.
func wantRemaining(t *testing.T, lim *addrlimit.Limiter, when string, want ...int) {
	t.Helper()
	p, err := lim.Peek(context.Background(), "", "k")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for s := range p.Limits() {
		got = append(got, s.Remaining)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("remaining %s: %v, want %v", when, got, want)
	}
}

// The header fields of a policy of several limits: one list member per
// limit in RateLimit-Policy and RateLimit (draft-12), the tightest limit in
// the X-RateLimit fields, and Retry-After the longest wait among the
// denying limits.
func TestSeveralLimitsHeaders(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := addrlimit.WithClock(func() time.Time { return now })
	lim := mustNew(t, 10, time.Second, addrlimit.WithName("api"), addrlimit.WithLimit(12, time.Minute), clock)
	h := lim.Handler(okHandler)
	w := serve(h, req("192.0.2.1:1"))
	if got, want := w.Header().Get("RateLimit-Policy"), `"api-1s";q=10;w=1, "api-1m";q=12;w=60`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"api-1s";r=9;t=0, "api-1m";r=11;t=0`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	for range 9 {
		serve(h, req("192.0.2.1:1"))
	}
	now = now.Add(time.Second) // the 1s limit is full again; the 1m one holds 2.2
	serve(h, req("192.0.2.1:1"))
	serve(h, req("192.0.2.1:1"))
	w = serve(h, req("192.0.2.1:1"))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("13th request in a minute: %d", w.Code)
	}
	if got, want := w.Header().Get("RateLimit"), `"api-1s";r=8;t=0, "api-1m";r=0;t=4`; got != want {
		t.Errorf("denied RateLimit %q, want %q", got, want)
	}
	if got, want := w.Header().Get("Retry-After"), "4"; got != want {
		t.Errorf("Retry-After %q, want %q: the 1m limit's wait for a token (0.8 of 5 s)", got, want)
	}

	x := mustNew(t, 10, time.Second, addrlimit.WithName("api"), addrlimit.WithLimit(12, time.Minute), clock,
		addrlimit.WithHeaders(addrlimit.HeaderXRateLimit))
	xh := x.Handler(okHandler)
	w = serve(xh, req("192.0.2.1:1"))
	if got := [3]string{w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset")}; got != [3]string{"10", "9", "1"} {
		t.Errorf("X-RateLimit fields of the first request %v, want the 1s limit's: 10, 9, 1", got)
	}
	for range 9 {
		now = now.Add(time.Second / 5)
		w = serve(xh, req("192.0.2.1:1"))
	}
	if got := [3]string{w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset")}; got != [3]string{"12", "2", "49"} {
		t.Errorf("X-RateLimit fields of the 10th request %v, want the 1m limit's (fewer left): 12, 2, 49", got)
	}
}
