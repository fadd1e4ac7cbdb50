package addrlimit

import (
	"strconv"
	"strings"
	"testing"
)

// owes is key's debt as the next payment would see it, settled as paid.
func (r *debtRecord) owes(key string, now, tau int64) int {
	e, owed := r.take(key, now, tau)
	if e != nil {
		r.settle(e, owed, true)
	}
	return owed
}

func debtKey(i int) string { return "198.51.100." + strconv.Itoa(i) }

// An attacker with many addresses spending during an outage fills the debt
// record to its bound and no further: each new key takes the place of the
// oldest of the least debts. A key beyond the length bound is not recorded.
// Debts older than a refill time leave by themselves, so that the record
// empties one refill after the outage.
func TestDebtRecordIsBounded(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	const last = maxDebtKeys + 999 // the i-th key is charged at i ns
	for i := range last + 1 {
		r.add(debtKey(i), 1, int64(i), tau, 10)
	}
	if got := int(r.n.Load()); got != maxDebtKeys {
		t.Fatalf("%d keys owe, want the bound %d", got, maxDebtKeys)
	}
	if got := r.owes(debtKey(999), last, tau); got != 0 {
		t.Fatalf("the 1000th key, the oldest of the least debts, still owes %d", got)
	}
	if got := r.owes(debtKey(last), last, tau); got != 1 {
		t.Fatalf("the last key owes %d, want 1", got)
	}
	r.add(strings.Repeat("k", maxDebtKeyLen+1), 1, last, tau, 10)
	if got := r.owes(strings.Repeat("k", maxDebtKeyLen+1), last, tau); got != 0 {
		t.Fatalf("a key longer than %d bytes owes %d", maxDebtKeyLen, got)
	}
	// One refill time later every debt has expired: a new key takes the
	// place of one, and the others leave as the record is used.
	const later = last + tau + 1
	r.add("new", 1, later, tau, 10)
	for range maxDebtKeys {
		r.owes("other", later, tau)
	}
	if got := int(r.n.Load()); got != 1 {
		t.Fatalf("%d keys owe after a refill time, want 1", got)
	}
	if got := r.owes("new", later, tau); got != 1 {
		t.Fatalf("the new key owes %d, want 1", got)
	}
	if got := int(r.n.Load()); got != 0 {
		t.Fatalf("%d keys owe once paid, want 0", got)
	}
}

func TestDebtRecordCapsAndExpires(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	for range 30 {
		r.add("k", 1, 0, tau, 10)
	}
	if got := r.owes("k", 0, tau); got != 20 {
		t.Fatalf("owes %d, want the cap of 2 × burst = 20", got)
	}
	if got := r.owes("k", 0, tau); got != 0 {
		t.Fatalf("a paid debt is still owed: %d", got)
	}
	r.add("k", 3, 0, tau, 10)
	if got := r.owes("k", tau+1, tau); got != 0 {
		t.Fatalf("a debt older than a refill time is owed: %d", got)
	}
	r.add("k", 3, 0, tau, 10)
	r.cancel("k", 2)
	if got := r.owes("k", 0, tau); got != 1 {
		t.Fatalf("owes %d after a refund of 2 of 3, want 1", got)
	}
	r.add("k", 3, 0, tau, 10)
	r.cancel("k", -1)
	if got := int(r.n.Load()); got != 0 {
		t.Fatalf("%d keys owe after a reset", got)
	}
	// A debt is dated by its latest charge.
	r.add("k", 1, 300, tau, 10)
	r.add("k", 2, 100, tau, 10)
	if got := r.owes("k", 300+tau, tau); got != 3 {
		t.Fatalf("owes %d one refill after its first charge, want 3: dated by the latest charge", got)
	}
}

// A debt stays in its place while it is paid: a payment in flight is not
// paid twice, a charge meanwhile is owed beside it, and a payment that
// fails leaves the debt as it was.
func TestDebtRecordKeepsADebtThroughItsPayment(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	r.add("k", 5, 0, tau, 10)
	e, owed := r.take("k", 0, tau)
	if owed != 5 {
		t.Fatalf("took %d, want 5", owed)
	}
	if _, again := r.take("k", 0, tau); again != 0 {
		t.Fatalf("took %d more while 5 were being paid, want 0", again)
	}
	r.add("k", 2, 1, tau, 10)
	e2, owed2 := r.take("k", 1, tau)
	if owed2 != 2 {
		t.Fatalf("took %d charged during a payment, want 2", owed2)
	}
	r.settle(e, owed, false) // the first payment failed
	e3, owed3 := r.take("k", 1, tau)
	if owed3 != 5 {
		t.Fatalf("took %d after a failed payment of 5, want 5", owed3)
	}
	r.settle(e2, owed2, true)
	r.settle(e3, owed3, true)
	if got := int(r.n.Load()); got != 0 {
		t.Fatalf("%d keys owe once everything is paid", got)
	}
	// A debt reset during its payment is not put back when it fails.
	r.add("k", 5, 0, tau, 10)
	e, owed = r.take("k", 0, tau)
	r.cancel("k", -1)
	r.settle(e, owed, false)
	if got := int(r.n.Load()); got != 0 {
		t.Fatalf("%d keys owe after a reset during a failed payment", got)
	}
}

// The record keeps the largest debts: a flood of one-token debts, four times
// what the record holds, leaves a debt of 300 in place, even while it is
// being paid and its payments fail.
func TestDebtRecordKeepsTheLargestDebts(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	r.add("victim", 300, 0, tau, 300)
	e, owed := r.take("victim", 0, tau)
	for i := range 4 * maxDebtKeys {
		r.add(debtKey(i), 1, 1, tau, 300)
		if i%maxDebtKeys == 0 {
			r.settle(e, owed, false)
			e, owed = r.take("victim", 1, tau)
		}
	}
	r.settle(e, owed, false)
	if got := r.owes("victim", 1, tau); got != 300 {
		t.Fatalf("the victim owes %d after the flood, want 300", got)
	}
}

// The bound: a debt of d tokens is forgotten only after the other keys were
// charged at least (maxDebtKeys − 1) × d tokens since the record was last
// empty. Measured with one-token newcomers, the cheapest attack.
func TestDebtRecordForgetsADebtOnlyPastItsBound(t *testing.T) {
	const tau, d = int64(1e9), 3
	var r debtRecord
	r.add("victim", d, 0, tau, 10)
	others := 0
	for i := 0; ; i++ {
		r.add(debtKey(i), 1, 1, tau, 10)
		others++
		if r.m["victim"] == nil {
			break
		}
		if i > 10*maxDebtKeys*d {
			t.Fatal("the victim was never forgotten: the bound is not tight")
		}
	}
	if bound := (maxDebtKeys - 1) * d; others < bound {
		t.Fatalf("a debt of %d was forgotten after %d tokens of other keys, want at least %d", d, others, bound)
	}
	t.Logf("a debt of %d was forgotten after %d one-token debts of other keys (bound %d)", d, others, (maxDebtKeys-1)*d)
}

// A full record of debts that each outweigh one token cannot keep a
// spending newcomer out: its first token takes the place of the least of
// them, and its debt grows from there. Expired debts make room first.
func TestDebtRecordLetsANewcomerIn(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	for i := range maxDebtKeys {
		r.add(debtKey(i), 2, 0, tau, 10)
	}
	for range 50 {
		r.add("newcomer", 1, 0, tau, 100)
	}
	if got := r.owes("newcomer", 0, tau); got != 50 {
		t.Fatalf("the newcomer owes %d after 50 tokens, want 50", got)
	}

	r = debtRecord{}
	for i := range maxDebtKeys - 1 {
		r.add(debtKey(i), 5, 0, tau, 10)
	}
	r.add("recent", 1, tau, tau, 10)
	r.add("newcomer", 1, tau+1, tau, 10) // the others have expired
	if got := r.owes("recent", tau+1, tau); got != 1 {
		t.Fatalf("the least but recent debt owes %d, want 1: an expired one should have made room", got)
	}
	if got := r.owes("newcomer", tau+1, tau); got != 1 {
		t.Fatalf("the newcomer owes %d, want 1", got)
	}
}
