package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// serverTime returns Redis TIME, the clock of every lease.
func serverTime(t testing.TB, c redis.UniversalClient) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// expiry returns the expiry of l's lease as the store scored it, and
// whether l holds one.
func expiry(t testing.TB, c redis.UniversalClient, s *redisstore.Store, l store.Lease) (time.Time, bool) {
	t.Helper()
	score, err := c.ZScore(context.Background(), leaseKey(t, s, l), l.ID).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMicro(int64(score)), true
}

// leaseKey returns the Redis key of l's slots (l.ID may be empty).
func leaseKey(t testing.TB, s *redisstore.Store, l store.Lease) string {
	t.Helper()
	if l.ID == "" {
		l.ID = "any"
	}
	k, err := s.LeaseKey(l)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// zcard returns how many leases the set of l's slots holds, lapsed ones
// not yet dropped included.
func zcard(t testing.TB, c redis.UniversalClient, s *redisstore.Store, l store.Lease) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), leaseKey(t, s, l)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func acquire(t testing.TB, s *redisstore.Store, l store.Lease, limit int) (int, bool) {
	t.Helper()
	held, ok, err := s.Acquire(context.Background(), l, limit)
	if err != nil {
		t.Fatalf("Acquire(%+v, %d): %v", l, limit, err)
	}
	return held, ok
}

func release(t testing.TB, s *redisstore.Store, l store.Lease) {
	t.Helper()
	if err := s.Release(context.Background(), l); err != nil {
		t.Fatalf("Release(%+v): %v", l, err)
	}
}

// Two instances (two clients, two stores) share N slots of one key
// exactly: 64 goroutines each take N between them and not one more, and
// while they churn (acquire, check, release) no more than N are ever held,
// by the store's own count (ZCARD).
func TestInFlightTwoInstancesShareNExactly(t *testing.T) {
	needRedis(t)
	const n = 7
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	hour := redisstore.WithLeaseTime(time.Hour) // no lease lapses during the test
	fleet := []*redisstore.Store{newStore(t, shared.client(t), prefix, hour), newStore(t, shared.client(t), prefix, hour)}
	obs := shared.client(t)
	base := store.Lease{Policy: "export", Key: "198.51.100.7"}

	var won []store.Lease
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 128 { // 64 per instance
		wg.Go(func() {
			l := base
			l.ID = fmt.Sprint("hold-", g)
			held, ok, err := fleet[g%2].Acquire(context.Background(), l, n)
			if err != nil {
				t.Error(err)
				return
			}
			if held > n {
				t.Errorf("Acquire reported %d held of %d", held, n)
			}
			if ok {
				mu.Lock()
				won = append(won, l)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(won) != n {
		t.Fatalf("128 concurrent acquisitions on two instances took %d slots, want exactly %d", len(won), n)
	}
	if got := zcard(t, obs, fleet[0], base); got != n {
		t.Fatalf("ZCARD %d after the acquisitions, want %d", got, n)
	}
	for i, l := range won {
		release(t, fleet[i%2], l)
	}

	var holding, most, churned atomic.Int64
	for g := range 128 {
		wg.Go(func() {
			for i := range 20 {
				l := base
				l.ID = fmt.Sprint("churn-", g, "-", i)
				_, ok, err := fleet[g%2].Acquire(context.Background(), l, n)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				churned.Add(1)
				h := holding.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				if z := zcard(t, obs, fleet[0], base); z > n || z < 1 {
					t.Errorf("ZCARD %d while holding a slot, want 1..%d", z, n)
				}
				holding.Add(-1)
				if err := fleet[(g+i)%2].Release(context.Background(), l); err != nil { // either instance may release
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > n {
		t.Fatalf("%d slots held at once, limit %d", m, n)
	}
	if churned.Load() < n {
		t.Fatalf("only %d acquisitions succeeded while churning", churned.Load())
	}
	if got := zcard(t, obs, fleet[0], base); got != 0 {
		t.Fatalf("ZCARD %d after every lease was released, want 0", got)
	}
	t.Logf("%d acquisitions while churning, at most %d held at once (limit %d)", churned.Load(), most.Load(), n)
}

// An instance that dies (its client dropped: nothing renews its leases)
// gives its slots back once their leases lapse, in Redis time: every
// acquisition by another instance is refused while the dead one's leases
// are unexpired, and the k-th slot it gets back comes no earlier than the
// k-th of those expiries, each the acquisition's server time plus the
// lease time.
func TestInFlightDeadInstanceSlotsReturnWithinTheLease(t *testing.T) {
	needRedis(t)
	const n, lease = 3, 300 * time.Millisecond
	prefix := redisstore.WithKeyPrefix(testPrefix(t))
	dying := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true})
	dead := newStore(t, dying, prefix, redisstore.WithLeaseTime(lease))
	alive := newStore(t, shared.client(t), prefix, redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	base := store.Lease{Policy: "export", Key: "198.51.100.7"}

	before := serverTime(t, obs)
	for i := range n {
		l := base
		l.ID = fmt.Sprint("dead-", i)
		if _, ok := acquire(t, dead, l, n); !ok {
			t.Fatalf("the first instance's acquisition %d refused", i+1)
		}
	}
	after := serverTime(t, obs)
	var expiries []time.Time
	for i := range n {
		l := base
		l.ID = fmt.Sprint("dead-", i)
		e, ok := expiry(t, obs, dead, l)
		if !ok {
			t.Fatalf("lease %s not held", l.ID)
		}
		if e.Before(before.Add(lease)) || e.After(after.Add(lease)) {
			t.Fatalf("lease %s expires at %v, want the acquisition's server time plus %v: between %v and %v", l.ID, e, lease, before.Add(lease), after.Add(lease))
		}
		expiries = append(expiries, e)
	}
	dying.Close() // the instance dies
	back := slotsBack(t, alive, obs, base, expiries, after)
	t.Logf("slots back %v after the dead instance's last acquisition (server time; lease %v)", back, lease)
}

// slotsBack acquires the slots of base's key through alive, one at a time,
// until it holds len(expiries) of them, and checks it against the dead
// holder's lease expiries, in Redis time: every refusal came before the
// last of them, and the k-th slot no earlier than the k-th. It returns
// when each slot came back, after since (server time), and fails if the
// last came later than the lease time plus 5 s after since, or if nothing
// was refused (the test then saw nothing).
func slotsBack(t *testing.T, alive *redisstore.Store, obs *redis.Client, base store.Lease, expiries []time.Time, since time.Time) []time.Duration {
	t.Helper()
	lease, n := alive.LeaseTime(), len(expiries)
	expiries = slices.SortedFunc(slices.Values(expiries), time.Time.Compare)
	got, refusals := 0, 0
	var back []time.Duration
	for deadline := time.Now().Add(30 * time.Second); got < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots back after 30 s of wall time (lease %v)", got, n, lease)
		}
		l := base
		l.ID = fmt.Sprint("alive-", got)
		pre := serverTime(t, obs)
		if _, ok := acquire(t, alive, l, n); !ok {
			if !pre.Before(expiries[n-1]) {
				t.Fatalf("refused at server time %v or later, when every dead lease had lapsed (the last at %v)", pre, expiries[n-1])
			}
			refusals++
			time.Sleep(10 * time.Millisecond) // polling Redis for a state
			continue
		}
		e, _ := expiry(t, obs, alive, l)
		at := e.Add(-lease) // the server time of the acquisition
		if at.Before(expiries[got]) {
			t.Fatalf("slot %d back at server time %v, before the dead lease expiring at %v lapsed", got+1, at, expiries[got])
		}
		back = append(back, at.Sub(since))
		got++
	}
	if last := back[n-1]; last > lease+5*time.Second {
		t.Fatalf("the last slot came back %v after %v, want within the lease %v + 5 s", last, since, lease)
	}
	if refusals == 0 {
		t.Fatal("no acquisition was refused while the dead instance's leases ran: the test saw nothing")
	}
	return back
}

// holderEnv, when set (to "addr prefix n lease"), makes the test binary an
// instance that holds n slots of one key and renews them until it is
// killed (see TestMain): the instance TestInFlightSIGKILLedInstance kills.
const holderEnv = "ADDRLIMIT_TEST_INFLIGHT_HOLDER"

// holdSlots is the holder instance: it takes n slots, prints "holding", and
// renews them every third of the lease time, for ever.
func holdSlots(spec string) {
	f := strings.Fields(spec)
	n, err := strconv.Atoi(f[2])
	if err != nil {
		panic(err)
	}
	lease, err := time.ParseDuration(f[3])
	if err != nil {
		panic(err)
	}
	c := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true, ClientName: holderName(os.Getpid())})
	s, err := redisstore.New(c, redisstore.WithKeyPrefix(f[1]), redisstore.WithLeaseTime(lease), redisstore.WithTimeout(testTimeout))
	if err != nil {
		panic(err)
	}
	var ls []store.Lease
	for i := range n {
		l := holderLease(i)
		if _, ok, err := s.Acquire(context.Background(), l, n); err != nil || !ok {
			panic(fmt.Sprint("acquire: ", ok, err))
		}
		ls = append(ls, l)
	}
	fmt.Println("holding")
	for {
		time.Sleep(lease / 3)
		if err := s.Renew(context.Background(), ls); err != nil {
			panic(err)
		}
	}
}

// holderName is the Redis client name of the holder process pid.
func holderName(pid int) string { return fmt.Sprint("inflight-holder-", pid) }

func holderLease(i int) store.Lease {
	return store.Lease{Policy: "export", Key: "198.51.100.7", ID: fmt.Sprint("dead-", i)}
}

// A real instance process, holding 3 slots and renewing them, killed with
// SIGKILL: its slots come back once their last renewed leases lapse, in
// Redis time (see slotsBack), and not before.
func TestInFlightSIGKILLedInstance(t *testing.T) {
	needRedis(t)
	const n, lease = 3, time.Second // the holder renews on a loaded machine
	prefix := testPrefix(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %v", holderEnv, shared.addr(), prefix, n, lease))
	dieWithTests(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "holding\n" {
			err = fmt.Errorf("holder printed %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("holder: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("holder not holding after 30 s\n%s", stderr.String())
	}
	alive := newStore(t, shared.client(t), redisstore.WithKeyPrefix(prefix), redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	if got := zcard(t, obs, alive, holderLease(0)); got != n {
		t.Fatalf("ZCARD %d while the holder runs, want %d", got, n)
	}
	time.Sleep(lease + lease/6) // three renewals, then half a renewal period
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := serverTime(t, obs)
	// A renewal the holder sent just before it died may still be in Redis's
	// socket: once Redis has closed the holder's connections, it has run
	// everything the holder sent.
	for deadline := time.Now().Add(10 * time.Second); ; {
		list, err := obs.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(list, "name="+holderName(cmd.Process.Pid)+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis still has the killed holder's connections after 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling Redis for a state
	}
	var expiries []time.Time
	for i := range n {
		e, ok := expiry(t, obs, alive, holderLease(i))
		if !ok {
			t.Fatalf("lease %d lapsed before the kill: the holder did not renew it (a stall of %v?)", i, lease*2/3)
		}
		expiries = append(expiries, e)
	}
	back := slotsBack(t, alive, obs, holderLease(0), expiries, killed)
	last := slices.MaxFunc(expiries, time.Time.Compare).Add(-lease)
	t.Logf("slots back %v after the SIGKILL, %v after the holder's last renewal (server time; lease %v, renewed every %v)", back, back[n-1]+killed.Sub(last), lease, lease/3)
}

// Renewal keeps a long request's slot for many lease times, in Redis time:
// each Renew sets the lease's expiry to its server time plus the lease
// time, and a competing acquisition is refused throughout.
func TestInFlightRenewKeepsALongRequestsSlot(t *testing.T) {
	needRedis(t)
	const lease = 500 * time.Millisecond
	s := newStore(t, shared.client(t), redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	long := store.Lease{Policy: "stream", Key: "198.51.100.7", ID: "long"}
	other := store.Lease{Policy: "stream", Key: "198.51.100.7", ID: "other"}
	// A renewal needs the test to run within the lease's last two thirds:
	// a machine that stalls longer makes the lease lapse, as it should;
	// the run then starts over (three tries).
	for try := 1; ; try++ {
		ok, why := renewFor(t, s, obs, long, other, 4*lease)
		if ok {
			break
		}
		if try == 3 {
			t.Fatalf("three tries stalled: %s", why)
		}
		t.Logf("try %d: %s", try, why)
		release(t, s, long)
	}
}

// renewFor holds long's slot for d of Redis time, renewing it every third
// of the lease time, and checks each renewal. It reports false and why
// when the test itself ran too late for a renewal (the lease lapsed, and
// Renew did not take it back).
func renewFor(t *testing.T, s *redisstore.Store, obs *redis.Client, long, other store.Lease, d time.Duration) (bool, string) {
	lease := s.LeaseTime()
	if _, ok := acquire(t, s, long, 1); !ok {
		t.Fatal("the first acquisition was refused")
	}
	start, _ := expiry(t, obs, s, long)
	start = start.Add(-lease)
	renewals := 0
	for {
		time.Sleep(lease / 3)
		pre := serverTime(t, obs)
		held, _ := expiry(t, obs, s, long)
		if err := s.Renew(context.Background(), []store.Lease{long}); err != nil {
			t.Fatal(err)
		}
		post := serverTime(t, obs)
		e, ok := expiry(t, obs, s, long)
		if !pre.Before(held) { // the test came after the lease lapsed
			if ok && e.After(held) {
				t.Fatalf("Renew took back a lease that lapsed at %v, at %v", held, pre)
			}
			return false, fmt.Sprintf("renewal %d ran at server time %v, after the lease lapsed at %v", renewals+1, pre, held)
		}
		if !ok || e.Before(pre.Add(lease)) || e.After(post.Add(lease)) {
			t.Fatalf("renewal %d: expiry %v (held %v), want its server time plus %v: between %v and %v", renewals+1, e, ok, lease, pre.Add(lease), post.Add(lease))
		}
		renewals++
		if held, ok := acquire(t, s, other, 1); ok || held != 1 {
			t.Fatalf("after renewal %d, a competing acquisition: %d held, ok %v; want refused by the one held", renewals, held, ok)
		}
		if kept := post.Sub(start); kept >= d {
			t.Logf("held for %v of Redis time (%.1f lease times) with %d renewals", kept, float64(kept)/float64(lease), renewals)
			return true, ""
		}
	}
}

// A lease is freed once: releasing it twice, releasing a lease that
// lapsed (its slot since taken by another ID), or an ID never taken frees
// no other lease, by the store's own count (ZCARD).
func TestInFlightReleaseNeverFreesTwice(t *testing.T) {
	needRedis(t)
	const lease = 200 * time.Millisecond
	s := newStore(t, shared.client(t), redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	l := func(id string) store.Lease { return store.Lease{Policy: "export", Key: "k", ID: id} }
	want := func(id string, limit int, ok bool, held int) {
		t.Helper()
		if gotHeld, gotOK := acquire(t, s, l(id), limit); gotOK != ok || gotHeld != held {
			t.Fatalf("%s: %d held, ok %v; want %d, %v", id, gotHeld, gotOK, held, ok)
		}
	}
	wantSet := func(n int64, what string) {
		t.Helper()
		if got := zcard(t, obs, s, l("")); got != n {
			t.Fatalf("ZCARD %d after %s, want %d", got, what, n)
		}
	}
	want("a", 2, true, 1)
	want("b", 2, true, 2)
	release(t, s, l("a"))
	release(t, s, l("a"))
	release(t, s, l("never"))
	wantSet(1, "releasing a twice (b is held)")
	want("c", 2, true, 2)
	release(t, s, l("a"))
	wantSet(2, "a third release of a (b and c are held)")
	want("d", 2, false, 2)
	release(t, s, l("b"))
	release(t, s, l("c"))

	// e lapses; f takes its slot; e's late release frees nothing of f's.
	want("e", 1, true, 1)
	e, _ := expiry(t, obs, s, l("e"))
	for serverTime(t, obs).Before(e) {
		time.Sleep(10 * time.Millisecond) // polling Redis time
	}
	want("f", 1, true, 1)
	release(t, s, l("e"))
	wantSet(1, "the lapsed lease's release (f is held)")
	want("g", 1, false, 1)
	release(t, s, l("f"))
	if n, err := obs.Exists(context.Background(), leaseKey(t, s, l(""))).Result(); err != nil || n != 0 {
		t.Fatalf("the set of a key with no lease exists: %d, %v", n, err)
	}
}

// failZREM is a go-redis hook that fails ZREM, as a network blip would,
// while on is set.
type failZREM struct{ on atomic.Bool }

func (*failZREM) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failZREM) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrem" && f.on.Load() {
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (*failZREM) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A Release that Redis never hears (a blip) returns an error, and the slot
// stays held until its lease lapses, then returns: never leaked for longer.
func TestInFlightReleaseDuringABlipLapses(t *testing.T) {
	needRedis(t)
	const lease = 300 * time.Millisecond
	c := shared.client(t)
	blip := new(failZREM)
	c.AddHook(blip)
	s := newStore(t, c, redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	a := store.Lease{Policy: "export", Key: "k", ID: "a"}
	b := store.Lease{Policy: "export", Key: "k", ID: "b"}
	acquire(t, s, a, 1)
	blip.on.Store(true)
	err := s.Release(context.Background(), a)
	if err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("Release during a blip: %v, want a redisstore error wrapping the cause", err)
	}
	blip.on.Store(false)
	e, ok := expiry(t, obs, s, a)
	if !ok {
		t.Fatal("a released though Redis never heard the release")
	}
	for {
		pre := serverTime(t, obs)
		_, got := acquire(t, s, b, 1)
		if got {
			be, _ := expiry(t, obs, s, b)
			if at := be.Add(-lease); at.Before(e) {
				t.Fatalf("b took the slot at %v, before a's lease lapsed at %v", at, e)
			}
			break
		}
		if !pre.Before(e) {
			t.Fatalf("b refused at server time %v, after a's lease lapsed at %v", pre, e)
		}
		time.Sleep(10 * time.Millisecond) // polling Redis time
	}
}

// Keys: one sorted set per (policy, key) beside the rate buckets, expiring
// with its last lease; invalid leases, limits and lease times are errors.
func TestInFlightKeysAndErrors(t *testing.T) {
	needRedis(t)
	prefix := testPrefix(t)
	const lease = 2 * time.Second
	s := newStore(t, shared.client(t), redisstore.WithKeyPrefix(prefix), redisstore.WithLeaseTime(lease))
	obs := shared.client(t)
	l := store.Lease{Policy: "export", Key: "198.51.100.7", ID: "a"}
	if got, want := leaseKey(t, s, l), prefix+"export/inflight:k:198.51.100.7"; got != want {
		t.Fatalf("key %q, want %q", got, want)
	}
	long := store.Lease{Policy: "export", Key: strings.Repeat("x", 201), ID: "a"}
	if got := leaseKey(t, s, long); !strings.HasPrefix(got, prefix+"export/inflight:h:") {
		t.Fatalf("a 201-byte key is %q, want its SHA-256 under :h:", got)
	}
	acquire(t, s, l, 1)
	if held, ok := acquire(t, s, l, 1); !ok || held != 1 {
		t.Fatalf("an ID acquired again (a retried call): %d held, ok %v; want 1, true: its own slot, counted once", held, ok)
	}
	ttl, err := obs.PTTL(context.Background(), leaseKey(t, s, l)).Result()
	if err != nil || ttl <= 0 || ttl > lease+time.Millisecond {
		t.Fatalf("PTTL of the set %v, %v; want at most the lease time %v (+1 ms)", ttl, err, lease)
	}
	if s.LeaseTime() != lease {
		t.Fatalf("LeaseTime() = %v, want %v", s.LeaseTime(), lease)
	}
	for _, bad := range []struct {
		l     store.Lease
		limit int
		want  string
	}{
		{l, 0, "in-flight limit must be at least 1, got 0"},
		{store.Lease{Policy: "export", Key: "k"}, 1, "lease ID must be 1 to 200 bytes, got 0"},
		{store.Lease{Policy: "export", Key: "k", ID: strings.Repeat("i", 201)}, 1, "lease ID must be 1 to 200 bytes, got 201"},
		{store.Lease{Policy: "a/inflight:k:b", Key: "k", ID: "a"}, 1, "has a character outside"},
	} {
		_, _, err := s.Acquire(context.Background(), bad.l, bad.limit)
		if err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Acquire(%+v, %d): %v, want an error saying %q", bad.l, bad.limit, err, bad.want)
		}
	}
	e, _ := expiry(t, obs, s, l)
	err = s.Renew(context.Background(), []store.Lease{{Policy: "export", Key: "k"}, l})
	if err == nil || !strings.Contains(err.Error(), "renewing 1 of 2 leases") || !strings.Contains(err.Error(), "lease ID must be") {
		t.Fatalf("Renew of an invalid and a valid lease: %v, want an error about the invalid one", err)
	}
	if renewed, _ := expiry(t, obs, s, l); !renewed.After(e) {
		t.Fatalf("the valid lease was not renewed beside an invalid one: expiry %v, was %v", renewed, e)
	}
	for _, d := range []time.Duration{0, 99 * time.Millisecond, time.Hour + 1} {
		_, err := redisstore.New(shared.client(t), redisstore.WithLeaseTime(d))
		if want := "redisstore: lease time must be between 100ms and 1h0m0s, got " + d.String(); err == nil || err.Error() != want {
			t.Errorf("WithLeaseTime(%v): %v, want %q", d, err, want)
		}
	}
	d, err := redisstore.New(shared.client(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.LeaseTime() != redisstore.DefaultLeaseTime {
		t.Fatalf("default LeaseTime() = %v, want %v", d.LeaseTime(), redisstore.DefaultLeaseTime)
	}
}

// One Renew of 600 leases on a single Redis is one round trip: one
// pipeline of three script calls (256 leases each at most), and renews
// every one of them.
func TestInFlightRenewIsOneRoundTrip(t *testing.T) {
	needRedis(t)
	obs, count, s := countedStore(t, redisstore.WithLeaseTime(time.Minute))
	var ls []store.Lease
	for i := range 600 {
		l := store.Lease{Policy: "export", Key: "k" + strconv.Itoa(i%50), ID: strconv.Itoa(i)}
		acquire(t, s, l, 12)
		ls = append(ls, l)
	}
	before := serverTime(t, obs)
	count.pipes.Store(0)
	count.n.Store(0)
	if err := s.Renew(context.Background(), ls); err != nil {
		t.Fatal(err)
	}
	if p, sc := count.pipes.Load(), count.n.Load(); p != 1 || sc != 3 {
		t.Fatalf("Renew of 600 leases: %d pipelines, %d script calls; want 1 and 3", p, sc)
	}
	for _, l := range ls {
		if e, ok := expiry(t, obs, s, l); !ok || e.Before(before.Add(time.Minute)) {
			t.Fatalf("lease %s: expiry %v, held %v; want renewed after %v", l.ID, e, ok, before)
		}
	}
}

// inflightOnCluster: on a real Cluster, leases of keys in many slots (on
// every master) are acquired, renewed in one call and released without a
// cross-slot error, and a key's set shares the slot of the key's rate
// buckets when the key has a hash tag.
func inflightOnCluster(t *testing.T, nodes []*redisServer) {
	c := clusterClient(t, nodes)
	s := newStore(t, c, redisstore.WithLeaseTime(time.Minute))
	var ls []store.Lease
	masters := map[string]bool{}
	for i := range 32 {
		l := store.Lease{Policy: "export", Key: fmt.Sprint("key-", i), ID: "a"}
		if i%4 == 0 {
			l.Key = fmt.Sprintf("{user%d}:export", i)
		}
		if held, ok := acquire(t, s, l, 1); !ok || held != 1 {
			t.Fatalf("%s: %d held, ok %v", l.Key, held, ok)
		}
		ls = append(ls, l)
		m, err := c.MasterForKey(context.Background(), leaseKey(t, s, l))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("32 keys on %d masters, want all 3", len(masters))
	}
	before := serverTime(t, c)
	if err := s.Renew(context.Background(), ls); err != nil {
		t.Fatalf("Renew across slots: %v", err)
	}
	rate := addrlimit.Policy{Name: "export", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Second}}}
	for _, l := range ls {
		if e, ok := expiry(t, c, s, l); !ok || e.Before(before.Add(time.Minute)) {
			t.Fatalf("%s: expiry %v, held %v; want renewed", l.Key, e, ok)
		}
		if !strings.HasPrefix(l.Key, "{") {
			continue
		}
		set, err := c.ClusterKeySlot(context.Background(), leaseKey(t, s, l)).Result()
		if err != nil {
			t.Fatal(err)
		}
		bucket, err := c.ClusterKeySlot(context.Background(), s.RedisKey(l.Key, rate)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if set != bucket {
			t.Fatalf("%s: in-flight set in slot %d, rate bucket in slot %d", l.Key, set, bucket)
		}
	}
	for _, l := range ls {
		release(t, s, l)
		if n, err := c.Exists(context.Background(), leaseKey(t, s, l)).Result(); err != nil || n != 0 {
			t.Fatalf("%s: set left after its only lease was released: %d, %v", l.Key, n, err)
		}
	}
}

// BenchmarkInFlight: an acquisition and its release (two round trips) per
// op against a loopback Redis, at 1 and 64 concurrent callers, over 250
// keys ("decisions/s" counts these pairs). redis-cpu-µs/op is the CPU time
// Redis used per pair (INFO cpu).
func BenchmarkInFlight(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			needRedis(b)
			c := redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true, PoolSize: 128})
			defer c.Close()
			s := newStore(b, c)
			before := redisCPU(b, c)
			var ids atomic.Int64
			parallel(b, callers, func(i int) error {
				l := store.Lease{Policy: "bench", Key: "198.51.100." + strconv.Itoa(i%250), ID: strconv.FormatInt(ids.Add(1), 36)}
				if _, ok, err := s.Acquire(context.Background(), l, 1000); err != nil || !ok {
					return fmt.Errorf("acquire: %v, %w", ok, err)
				}
				return s.Release(context.Background(), l)
			})
			b.ReportMetric(float64(redisCPU(b, c)-before)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// Redis killed: in-flight calls fail with the network error, count toward
// the node's circuit breaker (shared with Take), and once it is open
// Acquire, Renew, Release and Take fail at once with ErrCircuitOpen; once
// Redis is back, Acquire works again.
func TestInFlightBreaker(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c, redisstore.WithTimeout(500*time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond), redisstore.WithLeaseTime(time.Second))
	ctx := context.Background()
	l := store.Lease{Policy: "export", Key: "k", ID: "a"}
	acquire(t, s, l, 2)
	srv.stop()
	for i := range 3 {
		_, _, err := s.Acquire(ctx, store.Lease{Policy: "export", Key: "k", ID: fmt.Sprint("b", i)}, 2)
		if err == nil || errors.Is(err, redisstore.ErrCircuitOpen) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Fatalf("failure %d: %v, want the network error", i+1, err)
		}
	}
	sent := calls.n.Load()
	p := addrlimit.Policy{Name: "export", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
	for name, f := range map[string]func() error{
		"Acquire": func() error { _, _, err := s.Acquire(ctx, l, 2); return err },
		"Renew":   func() error { return s.Renew(ctx, []store.Lease{l, l}) },
		"Release": func() error { return s.Release(ctx, l) },
		"Take":    func() error { _, err := s.Take(ctx, "k", p, 1); return err },
	} {
		if err := f(); !errors.Is(err, redisstore.ErrCircuitOpen) {
			t.Fatalf("%s with the circuit open: %v, want ErrCircuitOpen", name, err)
		}
	}
	if n := calls.n.Load() - sent; n != 0 {
		t.Fatalf("%d script calls sent while the circuit was open", n)
	}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, s)
	if held, ok := acquire(t, s, l, 2); !ok || held != 1 {
		t.Fatalf("after recovery: %d held, ok %v; want 1, true (a restarted Redis holds no lease)", held, ok)
	}
}

// A policy with an in-flight limit and no rate limit on Redis: the store
// accepts it (CheckPolicy), two instances share its 2 slots exactly, and
// no decision touches a bucket: the only key under the prefix is the
// policy's lease set. The store's Take refuses such a policy with an error.
func TestInFlightAloneOnRedis(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	prefix := testPrefix(t)
	export := addrlimit.Policy{Name: "export", InFlight: 2}
	var lims []*addrlimit.Limiter
	var s *redisstore.Store
	for range 2 {
		s = newStore(t, shared.client(t), redisstore.WithKeyPrefix(prefix), redisstore.WithLeaseTime(time.Hour))
		lim, err := addrlimit.New(300, time.Minute, addrlimit.WithStore(s), addrlimit.WithPolicy(export))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	a := lims[0].AllowKey(ctx, "export", "198.51.100.7", 1)
	b := lims[1].AllowKey(ctx, "export", "198.51.100.7", 1)
	c := lims[0].AllowKey(ctx, "export", "198.51.100.7", 1)
	if !a.HoldsSlot() || !b.HoldsSlot() || !c.Denied() || !c.InFlightLimited || c.Degraded {
		t.Fatalf("decisions %+v, %+v, %+v: want two slots held, the third refused by the in-flight limit", a, b, c)
	}
	obs := shared.client(t)
	keys, err := obs.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	lease := store.Lease{Policy: "export", Key: "198.51.100.7"}
	if want := leaseKey(t, s, lease); len(keys) != 1 || keys[0] != want {
		t.Fatalf("Redis keys %q, want only the lease set %q", keys, want)
	}
	if got := zcard(t, obs, s, lease); got != 2 {
		t.Fatalf("ZCARD %d, want 2", got)
	}
	lims[0].Release(ctx, a)
	lims[1].Release(ctx, b)
	if got := zcard(t, obs, s, lease); got != 0 {
		t.Fatalf("ZCARD %d after both releases, want 0", got)
	}
	if err := s.CheckPolicy(export); err != nil {
		t.Fatalf("CheckPolicy: %v", err)
	}
	if _, err := s.Take(ctx, "k", export, 1); err == nil || !strings.Contains(err.Error(), `policy "export": has no rate limit`) {
		t.Fatalf("Take of a policy without rate limits: %v", err)
	}
}
