package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
)

// waitNotProbing waits until s's prober goroutine has exited (a state, not
// a duration).
func waitNotProbing(t *testing.T, s *redisstore.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Probing() {
		if time.Now().After(deadline) {
			t.Fatal("the prober still runs 10 s after the circuit closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Redis killed: the first three calls fail with the network error, then the
// circuit is open: calls fail at once, without reaching for Redis, with an
// error that is ErrCircuitOpen and wraps the cause. One goroutine probes;
// once Redis is back the circuit closes and the goroutine exits.
func TestBreakerOpensAndCloses(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c, redisstore.WithTimeout(500*time.Millisecond), redisstore.WithBreaker(3, 20*time.Millisecond))
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
	ctx := context.Background()
	if _, err := s.Take(ctx, "k", p, 1); err != nil {
		t.Fatal(err)
	}
	if s.Probing() {
		t.Fatal("a prober runs while Redis is healthy")
	}
	srv.stop()
	for i := range 3 {
		if _, err := s.Take(ctx, "k", p, 1); err == nil || errors.Is(err, redisstore.ErrCircuitOpen) {
			t.Fatalf("failure %d: %v, want the network error", i+1, err)
		}
	}
	sent := calls.n.Load()
	for range 100 {
		_, err := s.Take(ctx, "k", p, 1)
		if !errors.Is(err, redisstore.ErrCircuitOpen) || !strings.Contains(err.Error(), "the last: ") {
			t.Fatalf("error %v, want ErrCircuitOpen wrapping the last failure", err)
		}
	}
	for _, f := range []func() error{
		func() error { _, err := s.Refund(ctx, "k", p, 1); return err },
		func() error { _, err := s.Peek(ctx, "k", p); return err },
		func() error { return s.Reset(ctx, "k", p) },
	} {
		if err := f(); !errors.Is(err, redisstore.ErrCircuitOpen) {
			t.Fatalf("Refund/Peek/Reset with the circuit open: %v", err)
		}
	}
	if n := calls.n.Load() - sent; n != 0 {
		t.Fatalf("%d script calls sent while the circuit was open", n)
	}
	if !s.Probing() {
		t.Fatal("no prober with the circuit open")
	}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, s)
	if res, err := s.Take(ctx, "k", p, 1); err != nil || !res.Allowed {
		t.Fatalf("after recovery: %+v %v", res, err)
	}
	waitNotProbing(t, s)
}

// A caller that gives up (its context ends) says nothing about Redis, and
// neither does an error reply about the call itself.
func TestBreakerIgnoresCallerCancellations(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	s := newStore(t, c, redisstore.WithBreaker(1, time.Hour))
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, "k", p, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled call: %v", err)
	}
	// The caller's deadline ends the call while Redis is paused.
	if err := srv.client(t).Do(context.Background(), "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := s.Take(short, "k", p, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past the caller's deadline: %v", err)
	}
	// A key that holds something else: WRONGTYPE, an answer from Redis.
	if err := c.LPush(context.Background(), s.RedisKey("list", p), "x").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Take(context.Background(), "list", p, 1); err == nil || errors.Is(err, redisstore.ErrCircuitOpen) {
			t.Fatalf("Take of a list: %v, want Redis's error", err)
		}
	}
	if res, err := s.Take(context.Background(), "k", p, 1); err != nil || !res.Allowed {
		t.Fatalf("after cancellations and error replies: %+v %v; the circuit must stay closed", res, err)
	}
}

// Calls queued for a batch when the circuit opens fail at once with
// ErrCircuitOpen instead of each waiting for a round trip of its own: an
// outage costs a queued call at most the round trip ahead of it.
func TestQueuedCallsFailAtOnceWhenTheCircuitOpens(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c, redisstore.WithTimeout(300*time.Millisecond), redisstore.WithBreaker(1, time.Hour))
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
	if err := s.Reset(context.Background(), "warm-up", p); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := srv.client(t).Do(context.Background(), "CLIENT", "PAUSE", 5000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	started := make(chan int64, 4)
	release := make(chan struct{})
	calls.gate = func(keys int64) {
		started <- keys
		<-release // held until the calls have queued; then Redis, paused, times them out
	}
	const queued = 20
	errs := queueBehindTwo(s, p, started, queued)
	close(release)
	var open int
	for range 2 + queued {
		if err := <-errs; errors.Is(err, redisstore.ErrCircuitOpen) {
			open++
		}
	}
	if open != queued {
		t.Fatalf("%d of %d queued calls failed with ErrCircuitOpen, want all: they were sent after the circuit opened", open, queued)
	}
	if n := len(started); n != 0 {
		t.Fatalf("%d more round trips sent after the circuit opened", n)
	}
}

// The breaker counts round trips, not the calls they carry: one batch of
// 20 calls that times out is one failure, so with a threshold of 2 the
// circuit stays closed.
func TestBreakerCountsRoundTripsNotCalls(t *testing.T) {
	srv := startServer(t)
	c := srv.client(t)
	admin := srv.client(t)
	var calls counter
	c.AddHook(&calls)
	s := newStore(t, c, redisstore.WithTimeout(300*time.Millisecond), redisstore.WithBreaker(2, time.Hour))
	p := addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour}}}
	ctx := context.Background()
	if err := s.Reset(ctx, "warm-up", p); err != nil { // loads the script
		t.Fatal(err)
	}
	started := make(chan int64, 4)
	held := []chan struct{}{make(chan struct{}), make(chan struct{})}
	batch := make(chan struct{})
	var n atomic.Int64
	calls.gate = func(keys int64) {
		i := n.Add(1)
		started <- keys
		switch i {
		case 1, 2:
			<-held[i-1]
		case 3:
			<-batch
		}
	}
	const queued = 20
	errs := queueBehindTwo(s, p, started, queued)
	// The first held call answered hands the lead to the queue, which goes
	// out in one batch, held by the gate; then the second, answered by
	// Redis before it is paused, finds the queue empty.
	close(held[0])
	if err := <-errs; err != nil {
		t.Fatalf("held call: %v", err)
	}
	if keys := <-started; keys != queued {
		t.Fatalf("the batch carried %d keys, want %d", keys, queued)
	}
	close(held[1])
	if err := <-errs; err != nil {
		t.Fatalf("held call: %v", err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 10000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	close(batch) // one round trip, timed out by the paused Redis
	failed := 0
	for range queued {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if failed != queued {
		t.Fatalf("%d calls failed, want the %d of the batch", failed, queued)
	}
	if _, err := s.Take(ctx, "after", p, 1); err != nil {
		t.Fatalf("after one failed round trip of %d calls: %v, want the circuit closed (threshold 2)", queued, err)
	}
}

// queueBehindTwo starts two Takes, each a round trip that the caller's gate
// holds (it sends to started, then blocks), then queued more, and returns
// once those wait for a batch. Every Take's error arrives on the channel.
func queueBehindTwo(s *redisstore.Store, p addrlimit.Policy, started <-chan int64, queued int) <-chan error {
	errs := make(chan error, 2+queued)
	take := func(key string) {
		_, err := s.Take(context.Background(), key, p, 1)
		errs <- err
	}
	for i := range 2 {
		go take(fmt.Sprint("held", i))
		<-started
	}
	for i := range queued {
		go take(fmt.Sprint("k", i))
	}
	for s.QueuedCalls() != queued {
		time.Sleep(time.Millisecond) // waiting for a state, not for a duration
	}
	return errs
}
