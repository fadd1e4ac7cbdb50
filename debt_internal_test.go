package addrlimit

import (
	"strconv"
	"strings"
	"testing"
)

// An attacker with many addresses spending during an outage fills the debt
// record to its bound and no further; keys beyond it are forgiven, and the
// expired debts make room again one refill time later.
func TestDebtRecordIsBounded(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	for i := range maxDebtKeys + 1000 {
		r.add("198.51.100."+strconv.Itoa(i), 1, 0, tau, 10)
	}
	if got := int(r.n.Load()); got != maxDebtKeys {
		t.Fatalf("%d keys owe, want the bound %d", got, maxDebtKeys)
	}
	if got, _ := r.take("198.51.100."+strconv.Itoa(maxDebtKeys+1), 0, tau); got != 0 {
		t.Fatalf("a key beyond the bound owes %d", got)
	}
	r.add(strings.Repeat("k", maxDebtKeyLen+1), 1, 0, tau, 10)
	if got, _ := r.take(strings.Repeat("k", maxDebtKeyLen+1), 0, tau); got != 0 {
		t.Fatalf("a key longer than %d bytes owes %d", maxDebtKeyLen, got)
	}
	// One refill time later every debt has expired: a new key sweeps them.
	r.add("new", 1, tau+1, tau, 10)
	if got := int(r.n.Load()); got != 1 {
		t.Fatalf("%d keys owe after the sweep, want 1", got)
	}
	if got, _ := r.take("new", tau+1, tau); got != 1 {
		t.Fatalf("the new key owes %d, want 1", got)
	}
}

func TestDebtRecordCapsAndExpires(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	for range 30 {
		r.add("k", 1, 0, tau, 10)
	}
	if got, _ := r.take("k", 0, tau); got != 20 {
		t.Fatalf("owes %d, want the cap of 2 × burst = 20", got)
	}
	if got, _ := r.take("k", 0, tau); got != 0 {
		t.Fatalf("a paid debt is still owed: %d", got)
	}
	r.add("k", 3, 0, tau, 10)
	if got, _ := r.take("k", tau+1, tau); got != 0 {
		t.Fatalf("a debt older than a refill time is owed: %d", got)
	}
	r.add("k", 3, 0, tau, 10)
	r.cancel("k", 2)
	if got, _ := r.take("k", 0, tau); got != 1 {
		t.Fatalf("owes %d after a refund of 2 of 3, want 1", got)
	}
	r.add("k", 3, 0, tau, 10)
	r.cancel("k", -1)
	if got := int(r.n.Load()); got != 0 {
		t.Fatalf("%d keys owe after a reset", got)
	}
}

// A debt given back after a failed payment keeps the time of its charge, and
// a key's debt is dated by its latest charge.
func TestDebtRecordKeepsTheAgeOfAGivenBackDebt(t *testing.T) {
	const tau = int64(1e9)
	var r debtRecord
	r.add("k", 2, 100, tau, 10)
	owed, at := r.take("k", 500, tau)
	if owed != 2 || at != 100 {
		t.Fatalf("took %d charged at %d, want 2 at 100", owed, at)
	}
	r.add("k", owed, at, tau, 10) // the payment failed
	if got, _ := r.take("k", 100+tau+1, tau); got != 0 {
		t.Fatalf("owes %d one refill after the charge, want 0", got)
	}
	r.add("k", 1, 300, tau, 10)
	r.add("k", 2, 100, tau, 10)
	if got, at := r.take("k", 300+tau, tau); got != 3 || at != 300 {
		t.Fatalf("owes %d dated %d, want 3 dated by the latest charge, 300", got, at)
	}
}
