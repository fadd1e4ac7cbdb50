package bucket

import (
	"testing"
	"time"
)

// remainingOf is the whole tokens of limit j of h's buckets at now.
func remainingOf(t *testing.T, tab *Table, h uint64, now int64, j int) int {
	t.Helper()
	f, by := tab.Peek(h, now)
	p, _ := by.limit(j)
	r, _, _ := p.Read(now+int64(f[j]), now, 1)
	return r
}

// A successor keeps the tokens each bucket spent (250
// of 300 spent stays 250 spent when the burst becomes 400), capped at an
// empty bucket, and refills them at the new rate.
func TestSuccessorKeepsTokensSpent(t *testing.T) {
	const h = 42
	for _, tc := range []struct {
		name      string
		burst     int
		interval  time.Duration
		want      int // remaining at once
		wantLater int // remaining 3 s later
	}{
		{"burst 400, 150ms", 400, 150 * time.Millisecond, 150, 170},
		{"burst 300, 200ms (unchanged shape)", 300, 200 * time.Millisecond, 50, 65},
		{"burst 100, 200ms: empty", 100, 200 * time.Millisecond, 0, 15},
		{"burst 300, 1s: slower refill", 300, time.Second, 50, 53},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := NewTable(mustPolicy(t, 300, 200*time.Millisecond), 1024)
			now := int64(time.Hour)
			for range 250 {
				if ok, _, _, _ := old.Take(h, now, 1); !ok {
					t.Fatal("denied below the burst")
				}
			}
			next := old.Successor([]int{0}, mustPolicy(t, tc.burst, tc.interval))
			next.Settle(now)
			if got := remainingOf(t, next, h, now, 0); got != tc.want {
				t.Errorf("remaining after the change = %d, want %d", got, tc.want)
			}
			if got := remainingOf(t, next, h, now+int64(3*time.Second), 0); got != tc.wantLater {
				t.Errorf("remaining 3 s later = %d, want %d", got, tc.wantLater)
			}
			if st := next.Stats(); st.Allowed != 250 || st.Keys != 1 {
				t.Errorf("successor stats %+v, want the 250 allowed and 1 key carried over", st)
			}
		})
	}
}

// A caller still holding the old table after the change is served by the
// successor: its charge lands in the bucket that carries on, under the
// successor's limits, and Take says which table decided.
func TestSuccessorServesCallersOfTheOldTable(t *testing.T) {
	const h = 7
	now := int64(time.Hour)
	old := NewTable(mustPolicy(t, 10, time.Second), 1024)
	old.Take(h, now, 4)
	next := old.Successor([]int{0}, mustPolicy(t, 20, time.Second))
	// Nothing moved yet: the first call on the successor's shard moves it.
	ok, _, _, by := old.Take(h, now, 1)
	if !ok || by != old {
		t.Fatalf("before the move: allowed %v by the old table %v, want true, true", ok, by == old)
	}
	if got := remainingOf(t, next, h, now, 0); got != 15 {
		t.Fatalf("successor: remaining %d, want 20 - 5", got)
	}
	ok, _, f, by := old.Take(h, now, 2)
	if !ok || by != next {
		t.Fatalf("after the move: allowed %v by the successor %v, want true, true", ok, by == next)
	}
	if got, want := f[0], 7*time.Second; got != want {
		t.Errorf("state after the stale take: full in %v, want %v (7 tokens spent)", got, want)
	}
	// A chain: the old table's callers reach the newest table.
	last := next.Successor([]int{0}, mustPolicy(t, 30, time.Second))
	last.Settle(now)
	if _, _, _, by := old.Take(h, now, 1); by != last {
		t.Fatal("a call on a twice-replaced table did not reach the newest one")
	}
	if got := remainingOf(t, last, h, now, 0); got != 22 {
		t.Errorf("newest: remaining %d, want 30 - 8", got)
	}
	// Mirror carries a remote state of the old limits over as well.
	old.Mirror(h+1, now, Fulls{3 * time.Second})
	if got := remainingOf(t, last, h+1, now, 0); got != 27 {
		t.Errorf("mirrored through the old table: remaining %d, want 30 - 3", got)
	}
}

// Limits are carried by the from mapping: an added limit starts full, a
// removed one is dropped, the others keep their spent tokens.
func TestSuccessorMapsLimits(t *testing.T) {
	const h = 9
	now := int64(time.Hour)
	old := NewTable(mustPolicy(t, 100, time.Second), 1024, mustPolicy(t, 10, 100*time.Millisecond))
	old.Take(h, now, 6)
	// Keep the second limit as the first, add a new one, drop the first.
	next := old.Successor([]int{1, -1}, mustPolicy(t, 10, 100*time.Millisecond), mustPolicy(t, 50, time.Second))
	next.Settle(now)
	if got := remainingOf(t, next, h, now, 0); got != 4 {
		t.Errorf("kept limit: remaining %d, want 10 - 6", got)
	}
	if got := remainingOf(t, next, h, now, 1); got != 50 {
		t.Errorf("added limit: remaining %d, want a full 50", got)
	}
}

// Keys that left the exact table for the approximate memory are carried
// over too, never fuller than they were: every key's successor state has at
// least the tokens spent that its exact state would have carried.
func TestSuccessorCarriesApproximateMemory(t *testing.T) {
	const maxKeys, keys = 64, 4000
	now := int64(time.Hour)
	oldP := mustPolicy(t, 100, 10*time.Millisecond)
	old := NewTable(oldP, maxKeys)
	spent := make(map[uint64]int64, keys)
	for i := range uint64(keys) {
		h := i*0x9e3779b97f4a7c15 + 1
		n := int64(1 + i%50)
		if ok, _, _, _ := old.Take(h, now, n); ok {
			spent[h] = n
		}
	}
	if old.Stats().Evictions == 0 {
		t.Fatal("no key was evicted: the test does not reach the approximate memory")
	}
	newP := mustPolicy(t, 80, 30*time.Millisecond)
	next := old.Successor([]int{0}, newP)
	next.Settle(now)
	for h, n := range spent {
		want := min(n, 80) // tokens spent, in the new limit, at most its burst
		if got := remainingOf(t, next, h, now, 0); got > 80-int(want) {
			t.Fatalf("key %x spent %d: successor holds %d tokens, more than %d", h, n, got, 80-want)
		}
	}
}

func TestCarry(t *testing.T) {
	p300, p400 := mustPolicy(t, 300, 200), mustPolicy(t, 400, 150)
	const now = 1000
	for _, tc := range []struct {
		name   string
		po, pn Policy
		tat    int64
		want   int64
	}{
		{"full stays full", p300, p400, now - 5, now - 5},
		{"250 spent at 200 -> 250 at 150", p300, p400, now + 250*200, now + 250*150},
		{"a fraction rounds up", p400, p300, now + 1, now + 2},
		{"capped at empty", p400, mustPolicy(t, 100, 150), now + 400*150, now + 100*150},
		{"debt kept", p300, p400, now + 600*200, now + 600*150},
		{"debt capped at twice the burst", p300, mustPolicy(t, 100, 150), now + 600*200, now + 200*150},
	} {
		if got := carry(tc.po, tc.pn, tc.tat, now); got != tc.want {
			t.Errorf("%s: carry = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Stats of a table whose shards have moved (a caller that read the old
// configuration) reports its counters, without its memory, and does not
// fail on the moved shards.
func TestStatsOfAReplacedTable(t *testing.T) {
	now := int64(time.Hour)
	old := NewTable(mustPolicy(t, 10, time.Second), 1024, mustPolicy(t, 100, time.Minute))
	old.Take(1, now, 2)
	next := old.Successor([]int{0, 1}, mustPolicy(t, 20, time.Second), mustPolicy(t, 200, time.Minute))
	next.Settle(now)
	if st := old.Stats(); st.Allowed != 1 || st.Keys != 0 {
		t.Errorf("replaced table: %+v, want its 1 allowed and no keys", st)
	}
	if st := next.Stats(); st.Allowed != 1 || st.Keys != 1 {
		t.Errorf("successor: %+v, want 1 allowed and 1 key", st)
	}
}
