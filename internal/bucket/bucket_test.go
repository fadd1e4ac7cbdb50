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

// step advances time by d and takes one request from both. It reports false
// when the two disagree only because of x/time/rate's floating-point
// rounding at an exact token boundary, after which their states differ and
// the comparison must stop.
func (r *reference) step(d time.Duration) bool {
	r.t.Helper()
	r.now += int64(d)
	at := r.base.Add(time.Duration(r.now))
	before := r.lim.TokensAt(at)
	allowed := r.lim.AllowN(at, 1)
	after := r.lim.TokensAt(at)

	var res Result
	r.tat, res = r.p.Take(r.tat, r.now)
	if res.Allowed != allowed {
		if r.nearInteger(before) {
			return false
		}
		r.t.Fatalf("at %v (burst %d, interval %v): gcra allowed=%v, x/time/rate allowed=%v with %.9f tokens",
			time.Duration(r.now), r.p.Burst(), r.p.Interval(), res.Allowed, allowed, before)
	}
	if want := int(math.Floor(after)); res.Remaining != want && !r.nearInteger(after) {
		r.t.Fatalf("at %v: remaining %d, x/time/rate %d (%.9f tokens)", time.Duration(r.now), res.Remaining, want, after)
	}
	if after < 1 && !r.nearInteger(after) {
		// Time until one whole token: (1 - tokens) / rate, the GUIDE's formula.
		want := time.Duration((1 - after) / float64(r.lim.Limit()) * float64(time.Second))
		if diff := res.RetryAfter - want; diff < -time.Microsecond || diff > time.Microsecond {
			r.t.Fatalf("at %v: retry after %v, x/time/rate %v", time.Duration(r.now), res.RetryAfter, want)
		}
	} else if after >= 1 && res.RetryAfter != 0 {
		r.t.Fatalf("at %v: retry after %v with %.3f tokens left", time.Duration(r.now), res.RetryAfter, after)
	}
	return true
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
			if !r.step(d) {
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
		if !r.step(0) {
			t.Fatalf("step %d", i)
		}
	}
	p := r.p
	if _, res := p.Take(r.tat, r.now); res.Allowed || res.RetryAfter != 200*time.Millisecond || res.ResetAfter != time.Minute {
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
		for len(gaps) >= 2 {
			// Gaps in units of interval/256, so sequences cross token boundaries often.
			d := time.Duration(uint64(binary.LittleEndian.Uint16(gaps)) * uint64(interval) / 256)
			gaps = gaps[2:]
			if !r.step(d) {
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

func TestSweepDropsFullBuckets(t *testing.T) {
	p := mustPolicy(t, 10, 100*time.Millisecond) // full refill: 1s
	tab := NewTable(p, 100)                      // one shard
	if len(tab.shards) != 1 {
		t.Fatalf("%d shards", len(tab.shards))
	}
	for h := range uint64(60) {
		tab.Take(h, 0)
	}
	now := int64(time.Second) // all 60 full again
	for h := range uint64(10) {
		tab.Take(1000+h, now)
	}
	if n := tab.Len(); n != 10 {
		t.Fatalf("table holds %d buckets, want the 10 live ones", n)
	}
	if tab.Evictions() != 0 {
		t.Fatal("dropping full buckets counted as evictions")
	}
}

func TestEvictionSparesEmptyBuckets(t *testing.T) {
	p := mustPolicy(t, 4, time.Second)
	tab := NewTable(p, 8)
	// Four abusers empty their buckets; four light users take one token each.
	for h := range uint64(4) {
		for range 4 {
			tab.Take(h, 0)
		}
	}
	for h := uint64(4); h < 8; h++ {
		tab.Take(h, 0)
	}
	// A flood of new keys evicts only light users and flood keys.
	for h := uint64(100); h < 10_000; h++ {
		tab.Take(h, int64(h))
	}
	for h := range uint64(4) {
		if res := tab.Take(h, 20_000); res.Allowed {
			t.Fatalf("abuser %d was evicted and got a fresh bucket", h)
		}
	}
	if tab.Len() != 8 || tab.Evictions() != 10_000-100 {
		t.Fatalf("len %d evictions %d", tab.Len(), tab.Evictions())
	}
}

func TestEvictionPicksTheFullestBucket(t *testing.T) {
	p := mustPolicy(t, 10, time.Second)
	tab := NewTable(p, 3)
	tab.Take(1, 0)
	for range 5 {
		tab.Take(2, 0)
	}
	for range 3 {
		tab.Take(3, 0)
	}
	tab.Take(4, 0) // evicts key 1, which has 9 tokens left
	if _, ok := tab.shards[0].tats[1]; ok {
		t.Fatal("key 1 (fullest) survived")
	}
	for _, h := range []uint64{2, 3, 4} {
		if _, ok := tab.shards[0].tats[h]; !ok {
			t.Fatalf("key %d was evicted instead of the fullest", h)
		}
	}
}

func TestShardCaps(t *testing.T) {
	p := mustPolicy(t, 1, time.Second)
	for _, n := range []int{1, 2, 63, 64, 127, 128, 1000, 1 << 20} {
		tab := NewTable(p, n)
		sum := 0
		for i := range tab.shards {
			if tab.shards[i].max < 1 {
				t.Fatalf("maxKeys %d: shard %d has cap %d", n, i, tab.shards[i].max)
			}
			sum += tab.shards[i].max
		}
		if sum != n {
			t.Fatalf("maxKeys %d: shard caps sum to %d", n, sum)
		}
	}
}
