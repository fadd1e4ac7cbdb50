package bucket

import "time"

// result gathers what one call reports, so that tests can compare calls of
// the table with calls of the policy, its model. It mirrors store.Result,
// which the root package builds from the same four values.
type result struct {
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// The table's first limit as result reports it, from what the table
// reports (the time until full) at now, as the root package derives it.
func (t *Table) take(h uint64, now, n int64) result {
	a, _, f, _ := t.Take(h, now, n)
	need := n
	if a {
		need = 1
	}
	r, w, full := t.policy.Read(now+int64(f[0]), now, need)
	return result{a, r, w, full}
}

func (t *Table) refund(h uint64, now, n int64) result {
	return t.policy.peek(now+int64(fst(t.Refund(h, now, n))[0]), now)
}

func (t *Table) peek(h uint64, now int64) result {
	return t.policy.peek(now+int64(fst(t.Peek(h, now))[0]), now)
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

// fst is the states of a Peek or Refund, without the table that held them.
func fst(f Fulls, _ *Table) Fulls { return f }
