// Package limits is the arithmetic of a policy's several limits, each read
// from its bucket's time until full: what a bucket holds, how long until it
// holds what a call needs, and which limit is the tightest. Package store
// (Policy.Result) and the Limiter share it, so that one rule holds for both.
package limits

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/addrlimit/addrlimit/internal/headers"
)

// Max bounds the limits of one policy (store.MaxLimits).
const Max = 4

// Limit is a bucket shape: capacity Burst, one token every Interval.
type Limit struct {
	Burst    int
	Interval time.Duration
}

// Tau is l's full refill time: Burst × Interval.
func (l Limit) Tau() time.Duration { return time.Duration(l.Burst) * l.Interval }

// Read is what a bucket of l reports when it is full after full: the whole
// tokens it holds (none while in debt) and the time until it holds need of
// them.
func (l Limit) Read(full time.Duration, need int) (remaining int, wait time.Duration) {
	full = max(full, 0)
	remaining = int(max(l.Tau()-full, 0) / l.Interval)
	return remaining, l.wait(full, need)
}

// NextToken is the wait for one whole token of a bucket of l with
// remaining tokens that is full after full: zero while it holds one.
func (l Limit) NextToken(remaining int, full time.Duration) time.Duration {
	if remaining > 0 {
		return 0
	}
	// GCRA: the bucket holds a whole token once it is burst-1 tokens from
	// full.
	return max(full-time.Duration(l.Burst-1)*l.Interval, 0)
}

// wait is Read's wait, without its division.
func (l Limit) wait(full time.Duration, need int) time.Duration {
	return max(max(full, 0)+time.Duration(need)*l.Interval-l.Tau(), 0)
}

// fewer reports whether a bucket of l full after full holds fewer tokens,
// fractions counted, than a bucket of o full after ofull:
// (tau - full) / Interval < (o.tau - ofull) / o.Interval, both sides
// non-negative, multiplied out in 128 bits.
func (l Limit) fewer(full time.Duration, o Limit, ofull time.Duration) bool {
	a := uint64(max(l.Tau()-max(full, 0), 0))
	b := uint64(max(o.Tau()-max(ofull, 0), 0))
	ahi, alo := bits.Mul64(a, uint64(o.Interval))
	bhi, blo := bits.Mul64(b, uint64(l.Interval))
	return ahi < bhi || ahi == bhi && alo < blo
}

// Tightest is the index of the tightest of ls in the states resets, after
// a call that needed need tokens: the limit with the longest wait for
// them, or if none must wait, the one holding the fewest tokens, fractions
// counted (of equals, the first). It divides nothing: the limits are
// compared by their waits, and by their tokens as fractions compared by
// cross-multiplication.
func Tightest(ls []Limit, need int, resets *[Max]time.Duration) (tight int) {
	if len(ls) == 1 {
		return 0
	}
	var longest time.Duration
	for i, l := range ls {
		if wait := l.wait(resets[i], need); wait > longest {
			longest, tight = wait, i
		}
	}
	if longest == 0 {
		for i := 1; i < len(ls); i++ {
			if ls[i].fewer(resets[i], ls[tight], resets[tight]) {
				tight = i
			}
		}
	}
	return tight
}

// Summarize returns the tightest of ls in the states resets after a call
// that needed need tokens (Tightest), and what it reports (Report).
func Summarize(ls []Limit, need int, resets *[Max]time.Duration) (tight, remaining int, wait, full time.Duration) {
	if len(ls) > 1 { // one limit, the common case, makes no call
		tight = Tightest(ls, need, resets)
	}
	remaining, wait, full = Report(ls, tight, need, resets)
	return tight, remaining, wait, full
}

// Report is what limit tight of ls in the states resets reports after a
// call that needed need tokens: its whole tokens, its wait for need of
// them, and its time until full.
func Report(ls []Limit, tight, need int, resets *[Max]time.Duration) (remaining int, wait, full time.Duration) {
	full = max(resets[tight], 0)
	remaining, wait = ls[tight].Read(full, need)
	return remaining, wait, full
}

// Name is a limit's name: name if it is not empty, else one derived from
// the window of burst tokens per interval (headers.Window: whole seconds,
// rounded up), written in the largest unit that divides it: "1s", "90s",
// "1m", "2h", "1d".
func Name(name string, burst int, interval time.Duration) string {
	if name != "" {
		return name
	}
	window := headers.Window(burst, interval)
	for _, u := range [...]struct {
		secs int
		unit string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}} {
		if window%u.secs == 0 {
			return strconv.Itoa(window/u.secs) + u.unit
		}
	}
	return strconv.Itoa(window) + "s"
}
