package addrlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// debtStore is the in-memory store behind a switch: down, every call fails.
// It records the debts it was told of, and runs whileDown (if set) inside
// each call that fails, as a request of another goroutine would.
type debtStore struct {
	store.Store
	mu        sync.Mutex
	down      bool
	debts     []int
	byKey     map[string]int
	whileDown func()
}

var errDebtStoreDown = errors.New("debtstore: down")

func (s *debtStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *debtStore) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

func (s *debtStore) fail() error {
	if !s.isDown() {
		return nil
	}
	if s.whileDown != nil {
		s.whileDown()
	}
	return errDebtStoreDown
}

func (s *debtStore) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	if err := s.fail(); err != nil {
		return store.Result{}, err
	}
	return s.Store.Take(ctx, key, p, n)
}

func (s *debtStore) TakeWithDebt(ctx context.Context, key string, p addrlimit.Policy, n, debt int) (store.Result, error) {
	if err := s.fail(); err != nil {
		return store.Result{}, err
	}
	s.mu.Lock()
	s.debts = append(s.debts, debt)
	if s.byKey == nil {
		s.byKey = map[string]int{}
	}
	s.byKey[key] += debt
	s.mu.Unlock()
	return s.Store.Take(ctx, key, p, n) // the figures are not under test here
}

// toldBy returns the debts key paid in all.
func (s *debtStore) toldBy(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[key]
}

func (s *debtStore) told() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.debts...)
}

// What the local fallback allowed while the store failed is paid with the
// key's next Take that the store answers; a payment that fails is kept; a
// Reset cancels it.
func TestFailLocalPaysItsDebtWhenTheStoreAnswers(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(100)}
	lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(s))
	r := req("192.0.2.1:1")
	allow := func(want addrlimit.Outcome, degraded bool) {
		t.Helper()
		if d := lim.Allow(r); d.Outcome != want || d.Degraded != degraded {
			t.Fatalf("decision %+v, want %v (degraded %v)", d, want, degraded)
		}
	}
	allow(addrlimit.Allowed, false)
	s.setDown(true)
	for range 3 {
		allow(addrlimit.Allowed, true)
	}
	if got := s.told(); len(got) != 0 {
		t.Fatalf("debts told while down: %v", got)
	}
	s.setDown(false)
	allow(addrlimit.Allowed, false)
	if got := s.told(); len(got) != 1 || got[0] != 3 {
		t.Fatalf("debts told %v, want [3]", got)
	}
	allow(addrlimit.Allowed, false) // paid: a plain Take
	if got := s.told(); len(got) != 1 {
		t.Fatalf("a paid debt was told again: %v", got)
	}

	// A Reset forgets what the fallback spent.
	r2 := req("192.0.2.2:1")
	s.setDown(true)
	lim.Allow(r2)
	if err := lim.Reset(context.Background(), "", "192.0.2.2"); err != nil {
		t.Fatal(err)
	}
	s.setDown(false)
	lim.Allow(r2)
	if got := s.told(); len(got) != 1 {
		t.Fatalf("a reset key still owed: %v", got)
	}
}

// A payment that fails is kept for the next answer.
func TestAFailedDebtPaymentIsKept(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(100)}
	lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(s))
	r := req("192.0.2.1:1")
	s.setDown(true)
	lim.Allow(r)
	lim.Allow(r) // fails to pay 1, owes 2
	s.setDown(false)
	lim.Allow(r)
	if got := s.told(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("debts told %v, want [2]", got)
	}
}

// Under FailOpen nothing is charged, so nothing is owed.
func TestFailOpenOwesNothing(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(100)}
	lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(s), addrlimit.WithStoreFailure(addrlimit.FailOpen))
	r := req("192.0.2.1:1")
	s.setDown(true)
	lim.Allow(r)
	s.setDown(false)
	lim.Allow(r)
	if got := s.told(); len(got) != 0 {
		t.Fatalf("debts told under FailOpen: %v", got)
	}
}

// A refunded local decision owes nothing.
func TestARefundedLocalDecisionOwesNothing(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(100)}
	lim := mustNew(t, 5, time.Hour, addrlimit.WithStore(s), addrlimit.WithRefund(func(status int) bool { return status >= 500 }))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	s.setDown(true)
	serve(h, httptest.NewRequest("GET", "/fail", nil)) // refunded
	serve(h, httptest.NewRequest("GET", "/", nil))     // owed
	s.setDown(false)
	serve(h, httptest.NewRequest("GET", "/", nil))
	if got := s.told(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("debts told %v, want [1]", got)
	}
}

// A debt expires one full refill after its latest charge, however many
// payments fail in between: a failed payment gives it back with its age.
func TestADebtExpiresOneRefillAfterItsChargeThroughFailedPayments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &debtStore{Store: addrlimit.NewTestMemoryStore(100)}
		lim := mustNew(t, 1, time.Hour, addrlimit.WithStore(s)) // burst 1: a full refill is 1 h
		r := req("192.0.2.1:1")
		s.setDown(true)
		if d := lim.Allow(r); d.Outcome != addrlimit.Allowed || !d.Degraded {
			t.Fatalf("decision %+v, want allowed by the local fallback", d)
		}
		time.Sleep(30 * time.Minute)
		if d := lim.Allow(r); d.Outcome != addrlimit.Limited || !d.Degraded {
			t.Fatalf("decision %+v, want limited by the local fallback (no new debt)", d)
		}
		time.Sleep(31 * time.Minute) // 61 min after the charge, 31 after the failed payment
		s.setDown(false)
		lim.Allow(r)
		if got := s.told(); len(got) != 0 {
			t.Fatalf("debts told %v: a debt older than a full refill was paid", got)
		}
	})
}

// floodReq is a request from the i-th address of a flood, one of 2^24.
func floodReq(i int) *http.Request {
	return req(fmt.Sprintf("10.%d.%d.%d:1", i>>16&0xff, i>>8&0xff, i&0xff))
}

// A flood of other addresses during an outage, more than the debt record
// holds, each owing two tokens, does not keep a client's debt out of it:
// the client's first token takes the place of one of theirs, and its debt
// then outweighs them. (Before: the full record refused the client, which
// owed nothing.)
func TestAFloodOfOtherAddressesKeepsADebt(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(1 << 16)}
	lim := mustNew(t, 300, time.Minute, addrlimit.WithStore(s))
	victim := req("192.0.2.1:1")
	s.setDown(true)
	for i := range 16_400 { // two tokens each: more than the client's first
		lim.Allow(floodReq(i))
		lim.Allow(floodReq(i))
	}
	for range 300 {
		if d := lim.Allow(victim); d.Outcome != addrlimit.Allowed || !d.Degraded {
			t.Fatalf("decision %+v, want allowed by the local fallback", d)
		}
	}
	for i := range 16_400 { // more of them after the client
		lim.Allow(floodReq(16_400 + i))
	}
	s.setDown(false)
	lim.Allow(victim)
	if got := s.toldBy("192.0.2.1"); got != 300 {
		t.Fatalf("the client paid %d of the 300 tokens the fallback allowed it", got)
	}
}

// A flood of other addresses that lands while a client's payment fails
// does not take its debt's place: the debt stays in the record, and is paid
// in full once the store answers. (Before: the failed payment took the debt
// out and put it back, and the flood had filled the room meanwhile: the
// client paid nothing.)
func TestAFailedPaymentKeepsItsDebtThroughAFlood(t *testing.T) {
	s := &debtStore{Store: addrlimit.NewTestMemoryStore(1 << 16)}
	lim := mustNew(t, 300, time.Minute, addrlimit.WithStore(s))
	victim := req("192.0.2.1:1")
	s.setDown(true)
	owed := 0
	allow := func() {
		if d := lim.Allow(victim); d.Outcome == addrlimit.Allowed {
			owed++
		}
	}
	for range 300 {
		allow()
	}
	next := 0
	for range addrlimit.MaxDebtKeys - 1 { // the record is full
		lim.Allow(floodReq(next))
		next++
	}
	flooding := false
	s.whileDown = func() { // during each failed call, two more addresses
		if flooding {
			return
		}
		flooding = true
		for range 2 {
			lim.Allow(floodReq(next))
			next++
		}
		flooding = false
	}
	for range 100 {
		allow() // its payment fails, and the flood lands meanwhile
	}
	s.whileDown = nil
	s.setDown(false)
	lim.Allow(victim)
	if got := s.toldBy("192.0.2.1"); got != owed {
		t.Fatalf("the client paid %d of the %d tokens the fallback allowed it, want all", got, owed)
	}
}
