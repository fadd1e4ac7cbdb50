// Package bucket implements the token bucket that addrlimit enforces, in the
// form of the generic cell rate algorithm (GCRA): one int64 per key, the
// theoretical arrival time (TAT), from which the token count at any instant
// follows. GCRA with emission interval T and tolerance burst*T takes exactly the
// decisions of a token bucket of capacity burst refilled one token per T, which
// is what golang.org/x/time/rate implements with floating-point tokens.
//
// All times are int64 nanoseconds on a caller-chosen monotonic time line.
package bucket

import (
	"errors"
	"math"
	"time"
)

// Policy is a validated bucket shape. The zero value is not usable; build one
// with NewPolicy. A Policy is immutable and safe for concurrent use.
type Policy struct {
	burst    int64
	interval int64 // nanoseconds for one token to refill
	tau      int64 // burst * interval: nanoseconds for an empty bucket to refill
}

// NewPolicy returns the policy of a bucket of capacity burst that gains one
// token per interval. It rejects burst < 1, interval < 1ns and shapes whose full
// refill time does not fit in an int64 of nanoseconds.
func NewPolicy(burst int, interval time.Duration) (Policy, error) {
	if burst < 1 {
		return Policy{}, errors.New("burst must be at least 1")
	}
	if interval < 1 {
		return Policy{}, errors.New("refill interval must be at least 1ns")
	}
	if int64(burst) > math.MaxInt64/4/int64(interval) {
		return Policy{}, errors.New("burst times refill interval overflows")
	}
	return Policy{burst: int64(burst), interval: int64(interval), tau: int64(burst) * int64(interval)}, nil
}

// Take charges n tokens at now to a bucket whose state is tat (0, or any
// value <= now, for a full bucket; up to now + 2*tau for a bucket in debt,
// which Mirror can record) and returns the new state and whether the tokens
// were charged. A denied Take returns the state unchanged. The caller
// guarantees 1 <= n <= Burst.
func (p Policy) Take(tat, now, n int64) (next int64, allowed bool) {
	tat = max(tat, now)
	if next = tat + n*p.interval; next-now > p.tau {
		return tat, false
	}
	return next, true
}

// Refund gives n tokens back at now to a bucket in state tat, never above
// full, and returns the new state. The caller guarantees 1 <= n <= Burst.
func (p Policy) Refund(tat, now, n int64) int64 {
	return max(tat-n*p.interval, now)
}

// Read reports a bucket in state tat at now: the whole tokens it holds
// (none while in debt), the time until it holds need tokens (zero if it
// does; need >= 1), and the time until it is full.
func (p Policy) Read(tat, now, need int64) (remaining int, wait, full time.Duration) {
	tat = max(tat, now)
	remaining = int(max(now+p.tau-tat, 0) / p.interval)
	wait = time.Duration(max(tat+need*p.interval-p.tau-now, 0))
	return remaining, wait, time.Duration(tat - now)
}
