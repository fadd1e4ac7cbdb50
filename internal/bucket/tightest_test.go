package bucket_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
	"github.com/addrlimit/addrlimit/internal/limits"
)

// The table finds the tightest limit as it decides, so that the root
// package compares nothing more; limits.Tightest is the rule everyone
// else applies to a Result. Over random shapes of two to four limits
// (some sharing a shape, so that ties occur) and random traffic, the
// table's answer is always the rule's.
func TestTakeReportsTheTightestLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 3))
	shapes := []limits.Limit{
		{Burst: 3, Interval: 10 * time.Millisecond},
		{Burst: 10, Interval: 3 * time.Millisecond},
		{Burst: 5, Interval: 6 * time.Millisecond},
		{Burst: 30, Interval: time.Millisecond},
		{Burst: 7, Interval: 7 * time.Millisecond},
	}
	var denied, waits, fewest int
	for round := range 200 {
		n := 2 + rng.IntN(3)
		ls := make([]limits.Limit, n)
		ps := make([]bucket.Policy, n)
		for j := range ls {
			ls[j] = shapes[rng.IntN(len(shapes))]
			p, err := bucket.NewPolicy(ls[j].Burst, ls[j].Interval)
			if err != nil {
				t.Fatal(err)
			}
			ps[j] = p
		}
		tab := bucket.NewTable(ps[0], 1024, ps[1:]...)
		now := int64(time.Hour)
		for range 2000 {
			now += rng.Int64N(int64(4 * time.Millisecond))
			h := 1 + rng.Uint64N(8)
			cost := int64(1 + rng.IntN(3))
			allowed, tight, f, _ := tab.Take(h, now, cost)
			need := 1
			if !allowed {
				need = int(cost)
				denied++
			}
			resets := [limits.Max]time.Duration(f)
			if want := limits.Tightest(ls, need, &resets); tight != want {
				t.Fatalf("round %d, limits %v, states %v after a call of %d (allowed %v): table says %d, the rule %d", round, ls, f[:n], cost, allowed, tight, want)
			}
			switch _, wait := ls[tight].Read(resets[tight], need); {
			case !allowed:
			case wait > 0:
				waits++
			default:
				fewest++
			}
		}
	}
	// Each branch of the rule was taken, or the comparison says little.
	if denied == 0 || waits == 0 || fewest == 0 {
		t.Fatalf("denied %d, admitted with a wait %d, admitted by fewest tokens %d: a branch never ran", denied, waits, fewest)
	}
	t.Logf("denied %d, admitted with a wait %d, by fewest tokens %d", denied, waits, fewest)
}
