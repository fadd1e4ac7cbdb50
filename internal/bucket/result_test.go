package bucket

import "time"

// result gathers what one call reports, so that tests can compare calls of
// the table with calls of the policy, its model. It mirrors addrlimit.Result,
// which the root package builds from the same four values.
type result struct {
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
}

func (t *Table) take(h uint64, now, n int64) result {
	a, r, w, f := t.Take(h, now, n)
	return result{a, r, w, f}
}

func (t *Table) refund(h uint64, now, n int64) result {
	a, r, w, f := t.Refund(h, now, n)
	return result{a, r, w, f}
}

func (t *Table) peek(h uint64, now int64) result {
	a, r, w, f := t.Peek(h, now)
	return result{a, r, w, f}
}

// take is Policy.Take with the result Table.Take reports for it.
func (p Policy) take(tat, now, n int64) (int64, result) {
	next, allowed := p.Take(tat, now, n)
	need := n
	if allowed {
		need = 1
	}
	r, w, f := p.Read(next, now, need)
	return next, result{allowed, r, w, f}
}

// refund is Policy.Refund with the result Table.Refund reports for it.
func (p Policy) refund(tat, now, n int64) (int64, result) {
	tat = p.Refund(tat, now, n)
	return tat, p.peek(tat, now)
}

// peek is what Table.Peek reports for a bucket in state tat.
func (p Policy) peek(tat, now int64) result {
	r, w, f := p.Read(tat, now, 1)
	return result{r > 0, r, w, f}
}

// Burst is the bucket capacity, for tests.
func (p Policy) Burst() int { return int(p.burst) }

// Interval is the time for one token to refill, for tests.
func (p Policy) Interval() time.Duration { return time.Duration(p.interval) }
