package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit/store"
)

// inflightCases run on a store that implements store.InFlightStore (as
// Harness.New returns it, or behind FailLocal when the wrapper implements
// it too) and are skipped otherwise. The cases on lease time sleep a few
// lease times: they run in a bubble, or when LeaseTime is at most a second.
var inflightCases = []struct {
	name string
	run  func(s *suite)
}{
	{"in flight: the limit is exact", func(s *suite) {
		fs := s.inflight()
		for i, id := range []string{"a", "b", "c"} {
			s.acquire(fs, lease("k", id), 3, true, i+1)
		}
		s.acquire(fs, lease("k", "d"), 3, false, 3)
		s.release(fs, lease("k", "b"))
		s.acquire(fs, lease("k", "d"), 3, true, 3)
		s.acquire(fs, lease("k", "e"), 3, false, 3)
		s.acquire(fs, lease("k", "e"), 4, true, 4)
	}},
	{"in flight: a release frees its own lease, once", func(s *suite) {
		fs := s.inflight()
		s.acquire(fs, lease("k", "a"), 2, true, 1)
		s.acquire(fs, lease("k", "b"), 2, true, 2)
		s.release(fs, lease("k", "a"))
		s.release(fs, lease("k", "a"))     // twice
		s.release(fs, lease("k", "never")) // never taken
		s.release(fs, lease("other", "b")) // b's ID under another key
		s.acquire(fs, lease("k", "c"), 2, true, 2)
		s.acquire(fs, lease("k", "d"), 2, false, 2)
		s.release(fs, lease("k", "b"))
		s.release(fs, lease("k", "c"))
		s.acquire(fs, lease("k", "d"), 1, true, 1)
	}},
	{"in flight: keys and policies are independent", func(s *suite) {
		fs := s.inflight()
		for _, k := range []string{"192.0.2.1", "2001:db8::/64", "{tag}:user 42", "ключ", "k\x00nul", "k:x", string(make([]byte, 1000)), string(make([]byte, 1001))} {
			s.acquire(fs, lease(k, "a"), 1, true, 1)
			s.acquire(fs, lease(k, "b"), 1, false, 1)
		}
		other := store.Lease{Policy: "other", Key: "192.0.2.1", ID: "b"}
		s.acquire(fs, other, 1, true, 1)
		s.release(fs, lease("192.0.2.1", "a"))
		s.acquire(fs, store.Lease{Policy: "other", Key: "192.0.2.1", ID: "c"}, 1, false, 1)
	}},
	{"in flight: exact under concurrency", func(s *suite) {
		fs := s.inflight()
		const limit = 10
		var holding, most, acquired atomic.Int64
		var wg sync.WaitGroup
		for g := range 25 {
			wg.Go(func() {
				for i := range 8 {
					l := lease("shared", fmt.Sprint(g, "/", i))
					held, ok, err := fs.Acquire(context.Background(), l, limit)
					if err != nil {
						s.Error(err)
						return
					}
					if !ok {
						continue
					}
					acquired.Add(1)
					n := holding.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if held > limit {
						s.Errorf("Acquire reported %d held of %d", held, limit)
					}
					if i%2 == 1 { // hold the others to the end
						holding.Add(-1)
						if err := fs.Release(context.Background(), l); err != nil {
							s.Error(err)
						}
					}
				}
			})
		}
		wg.Wait()
		if got := most.Load(); got > limit {
			s.Fatalf("%d leases held at once under a limit of %d", got, limit)
		}
		if acquired.Load() < limit {
			s.Fatalf("%d acquisitions of a limit of %d, racing 25 goroutines", acquired.Load(), limit)
		}
		// The store counts exactly the leases still held: the rest of the
		// limit is free, and no more.
		for n := int(holding.Load()); n < limit; n++ {
			s.acquire(fs, lease("shared", fmt.Sprint("fill", n)), limit, true, n+1)
		}
		s.acquire(fs, lease("shared", "late"), limit, false, limit)
	}},
	{"in flight: a lease lapses unless renewed", func(s *suite) {
		fs := s.inflight()
		lt := s.leaseTime(fs)
		s.acquire(fs, lease("k", "a"), 2, true, 1)
		s.acquire(fs, lease("k", "b"), 2, true, 2)
		for i := range 10 { // four lease times
			time.Sleep(2 * lt / 5)
			s.renew(fs, lease("k", "a"))
			held := 1 // b, not renewed, lapsed one lease time after it was taken
			if i < 2 {
				held = 2
			}
			s.acquire(fs, lease("k", "c"), 1, false, held)
		}
		// b lapsed: a alone is held.
		s.acquire(fs, lease("k", "c"), 2, true, 2)
		s.release(fs, lease("k", "c"))
		time.Sleep(lt)
		// a lapsed too; a renewal does not take it back.
		s.renew(fs, lease("k", "a"))
		s.acquire(fs, lease("k", "d"), 1, true, 1)
		s.release(fs, lease("k", "a")) // a lapsed lease: frees nothing
		s.acquire(fs, lease("k", "e"), 1, false, 1)
	}},
	{"in flight: one Renew renews many leases", func(s *suite) {
		fs := s.inflight()
		lt := s.leaseTime(fs)
		if err := fs.Renew(context.Background(), nil); err != nil {
			s.Fatalf("Renew of no lease: %v", err)
		}
		var ls []store.Lease
		for k := range 20 {
			l := store.Lease{Policy: []string{"default", "other"}[k%2], Key: fmt.Sprint("key-", k), ID: "a"}
			s.acquire(fs, l, 1, true, 1)
			ls = append(ls, l)
		}
		time.Sleep(2 * lt / 3)
		s.renew(fs, ls...)
		time.Sleep(2 * lt / 3)
		for _, l := range ls {
			l.ID = "b"
			s.acquire(fs, l, 1, false, 1)
		}
	}},
}

// inflight returns the store under test as an InFlightStore, or skips the
// case.
func (s *suite) inflight() store.InFlightStore {
	s.Helper()
	fs, ok := s.s.(store.InFlightStore)
	if !ok {
		s.Skip("the store is not a store.InFlightStore")
	}
	return fs
}

// leaseTime returns fs's lease time, or skips the case when sleeping a few
// of them would take too long.
func (s *suite) leaseTime(fs store.InFlightStore) time.Duration {
	s.Helper()
	lt := fs.LeaseTime()
	if lt <= 0 {
		s.Fatalf("LeaseTime() = %v, want a positive duration", lt)
	}
	if !s.h.Bubble && lt > time.Second {
		s.Skipf("lease time %v: the case sleeps four of them (set Harness.Bubble, or a lease time of at most 1s)", lt)
	}
	return lt
}

func lease(key, id string) store.Lease {
	return store.Lease{Policy: "default", Key: key, ID: id}
}

func (s *suite) acquire(fs store.InFlightStore, l store.Lease, limit int, ok bool, held int) {
	s.Helper()
	gotHeld, gotOK, err := fs.Acquire(context.Background(), l, limit)
	if err != nil {
		s.Fatalf("Acquire(%+v, %d): %v", l, limit, err)
	}
	if gotOK != ok || gotHeld != held {
		s.Fatalf("Acquire(%+v, %d) = %d held, ok %v; want %d, %v", l, limit, gotHeld, gotOK, held, ok)
	}
}

func (s *suite) release(fs store.InFlightStore, l store.Lease) {
	s.Helper()
	if err := fs.Release(context.Background(), l); err != nil {
		s.Fatalf("Release(%+v): %v", l, err)
	}
}

func (s *suite) renew(fs store.InFlightStore, ls ...store.Lease) {
	s.Helper()
	if err := fs.Renew(context.Background(), ls); err != nil {
		s.Fatalf("Renew(%d leases): %v", len(ls), err)
	}
}
