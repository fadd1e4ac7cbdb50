package bucket

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// reference drives golang.org/x/time/rate side by side with a Policy.
type reference struct {
	t        *testing.T
	p        Policy
	lim      *rate.Limiter
	base     time.Time
	tat, now int64
}

func newReference(t *testing.T, burst int, interval time.Duration) *reference {
	p, err := NewPolicy(burst, interval)
	if err != nil {
		t.Fatal(err)
	}
	return &reference{t: t, p: p, lim: rate.NewLimiter(rate.Every(interval), burst), base: time.Unix(1_700_000_000, 0)}
}

// nearInteger reports whether float token count x is so close to a whole
// number that x/time/rate's rounding may have put it on either side: float64
// error, or its truncation of waits to whole nanoseconds (a wait under 1ns
// counts as none), which is 1ns worth of tokens.
func (r *reference) nearInteger(x float64) bool {
	tol := max(1e-6, 2/float64(r.p.Interval()))
	return math.Abs(x-math.Round(x)) < tol
}

// limiterAt returns a fresh x/time/rate limiter of r's shape that holds
// tokens (0 <= tokens <= burst) at instant at: full at some earlier instant s,
// charged the whole tokens missing at s, then refilled the fraction by at.
// x/time/rate has no way to add tokens, so this is how the reference models a
// refund, and how it probes a reservation without disturbing r.lim.
func (r *reference) limiterAt(at time.Time, tokens float64) *rate.Limiter {
	tokens = max(tokens, 0) // x/time/rate's float arithmetic can leave -0.000000000
	whole := math.Floor(tokens)
	frac := time.Duration(math.Round((tokens - whole) * float64(r.p.Interval())))
	lim := rate.NewLimiter(r.lim.Limit(), r.lim.Burst())
	if !lim.AllowN(at.Add(-frac), r.p.Burst()-int(whole)) {
		r.t.Fatalf("rebuilding a limiter with %.9f tokens failed", tokens)
	}
	return lim
}

// op is one call on both implementations.
type op struct {
	kind int // opTake, opRefund or opPeek
	n    int
}

const (
	opTake = iota
	opRefund
	opPeek
)

// step advances time by d and applies o to both. It reports false when the
// two disagree only because of x/time/rate's floating-point rounding at an
// exact token boundary, after which their states differ and the comparison
// must stop.
func (r *reference) step(d time.Duration, o op) bool {
	r.t.Helper()
	r.now += int64(d)
	at := r.base.Add(time.Duration(r.now))
	before := r.lim.TokensAt(at)
	var res result
	after := before
	switch o.kind {
	case opTake:
		allowed := r.lim.AllowN(at, o.n)
		after = r.lim.TokensAt(at)
		r.tat, res = r.p.take(r.tat, r.now, int64(o.n))
		if res.Allowed != allowed {
			if r.nearInteger(before - float64(o.n)) {
				return false
			}
			r.t.Fatalf("at %v (burst %d, interval %v): Take(%d) allowed=%v, x/time/rate allowed=%v with %.9f tokens",
				time.Duration(r.now), r.p.Burst(), r.p.Interval(), o.n, res.Allowed, allowed, before)
		}
		if !allowed {
			// Time until n tokens exist: what a reservation of n would wait.
			want := r.limiterAt(at, before).ReserveN(at, o.n).DelayFrom(at)
			r.checkDuration("retry after (denied Take)", res.RetryAfter, want)
			r.checkRemaining(res, after)
			r.checkResetAfter(res, after)
			return true
		}
	case opRefund:
		after = min(before+float64(o.n), float64(r.p.Burst())) // never above full
		r.lim = r.limiterAt(at, after)
		r.tat, res = r.p.refund(r.tat, r.now, int64(o.n))
	case opPeek:
		res = r.p.peek(r.tat, r.now)
	}
	if o.kind != opTake && res.Allowed != (after >= 1) && !r.nearInteger(after) {
		r.t.Fatalf("at %v: allowed=%v with %.9f tokens", time.Duration(r.now), res.Allowed, after)
	}
	r.checkRemaining(res, after)
	r.checkResetAfter(res, after)
	if after < 1 && !r.nearInteger(after) {
		// Time until one whole token: (1 - tokens) / rate, the GUIDE's formula.
		r.checkDuration("retry after", res.RetryAfter, time.Duration((1-after)/float64(r.lim.Limit())*float64(time.Second)))
	} else if after >= 1 && res.RetryAfter != 0 {
		r.t.Fatalf("at %v: retry after %v with %.3f tokens left", time.Duration(r.now), res.RetryAfter, after)
	}
	return true
}

func (r *reference) checkRemaining(res result, tokens float64) {
	r.t.Helper()
	if want := int(math.Floor(tokens)); res.Remaining != want && !r.nearInteger(tokens) {
		r.t.Fatalf("at %v: remaining %d, x/time/rate %d (%.9f tokens)", time.Duration(r.now), res.Remaining, want, tokens)
	}
}

func (r *reference) checkResetAfter(res result, tokens float64) {
	r.t.Helper()
	want := time.Duration((float64(r.p.Burst()) - tokens) / float64(r.lim.Limit()) * float64(time.Second))
	r.checkDuration("reset after", res.ResetAfter, want)
}

func (r *reference) checkDuration(what string, got, want time.Duration) {
	r.t.Helper()
	if diff := got - want; diff < -time.Microsecond || diff > time.Microsecond {
		r.t.Fatalf("at %v (burst %d, interval %v): %s %v, x/time/rate %v", time.Duration(r.now), r.p.Burst(), r.p.Interval(), what, got, want)
	}
}

// randomOp is mostly Take(1), as traffic is, with Take(n), Refund(n) and Peek.
func randomOp(rng *rand.Rand, burst int) op {
	switch rng.IntN(8) {
	case 0:
		return op{kind: opTake, n: 1 + rng.IntN(burst)}
	case 1:
		return op{kind: opRefund, n: 1 + rng.IntN(burst)}
	case 2:
		return op{kind: opPeek}
	default:
		return op{kind: opTake, n: 1}
	}
}

func TestPolicyMatchesXTimeRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	stopped, steps := 0, 0
	for range 500 {
		burst := 1 + rng.IntN(50)
		interval := time.Duration(1 + rng.Int64N(int64(3*time.Second)))
		r := newReference(t, burst, interval)
		for range 400 {
			// Mostly bursts (small gaps), sometimes long pauses.
			var d time.Duration
			switch rng.IntN(4) {
			case 0:
				d = 0
			case 1, 2:
				d = time.Duration(rng.Int64N(int64(interval)))
			default:
				d = time.Duration(rng.Int64N(int64(interval) * int64(burst+2)))
			}
			steps++
			if !r.step(d, randomOp(rng, burst)) {
				stopped++
				break
			}
		}
	}
	if stopped > 5 {
		t.Fatalf("%d of 500 sequences hit a float rounding boundary; expected next to none", stopped)
	}
	t.Logf("%d steps compared, %d sequences stopped at a rounding boundary", steps, stopped)
}

// TestPolicyWholeMilliseconds uses the policy from the incident (300/min) at
// millisecond times, where boundaries are hit exactly.
func TestPolicyIncidentShape(t *testing.T) {
	r := newReference(t, 300, 200*time.Millisecond)
	for i := range 300 {
		if !r.step(0, op{kind: opTake, n: 1}) {
			t.Fatalf("step %d", i)
		}
	}
	p := r.p
	if _, res := p.take(r.tat, r.now, 1); res.Allowed || res.RetryAfter != 200*time.Millisecond || res.ResetAfter != time.Minute {
		t.Fatalf("301st request: %+v", res)
	}
}

func FuzzPolicyMatchesXTimeRate(f *testing.F) {
	f.Add(uint8(5), uint32(200_000_000), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add(uint8(1), uint32(1), []byte{1, 2, 3, 4, 5, 6})
	f.Add(uint8(3), uint32(333_333_333), []byte{255, 255, 0, 0, 17, 99})
	f.Fuzz(func(t *testing.T, burst uint8, interval uint32, gaps []byte) {
		if burst == 0 || interval == 0 {
			if _, err := NewPolicy(int(burst), time.Duration(interval)); err == nil {
				t.Fatal("NewPolicy accepted a zero burst or interval")
			}
			return
		}
		r := newReference(t, int(burst), time.Duration(interval))
		for len(gaps) >= 3 {
			// Gaps in units of interval/256, so sequences cross token boundaries often.
			d := time.Duration(uint64(binary.LittleEndian.Uint16(gaps)) * uint64(interval) / 256)
			// The third byte picks the call: Take(1) for most values, else
			// Take, Refund or Peek of 1 + byte/4 mod burst tokens.
			o := op{kind: opTake, n: 1}
			if k := int(gaps[2] % 8); k < 3 {
				o = op{kind: k, n: 1 + int(gaps[2]/8)%int(burst)}
			}
			gaps = gaps[3:]
			if !r.step(d, o) {
				return
			}
		}
	})
}

func TestNewPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		burst    int
		interval time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -1}, {math.MaxInt32, time.Hour * 24 * 365}} {
		if _, err := NewPolicy(tc.burst, tc.interval); err == nil {
			t.Errorf("NewPolicy(%d, %v) succeeded", tc.burst, tc.interval)
		}
	}
}

func mustPolicy(t testing.TB, burst int, interval time.Duration) Policy {
	p, err := NewPolicy(burst, interval)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
