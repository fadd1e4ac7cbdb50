package redisstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit/store"
)

// The batcher sends concurrent calls to Redis together.
//
// A leader is a goroutine that holds one of the maxInflight in-flight
// slots: it sends one batch (its own call first, then queued calls, up to
// maxBatch, in one round trip) and, when the answer is in, either hands its
// slot to the first queued call or gives the slot back. A call that arrives
// while a slot is free leads at once; otherwise it queues. A queued call
// leaves the queue exactly once, under b.mu, in one of three ways:
//
//   - taken into a leader's batch: its caller then receives false on
//     c.lead once the batch is answered;
//   - handed the lead: its caller receives true and leads the next batch;
//   - removed by its own caller when ctx ends first (leave): the call is
//     never sent and fails with ctx's error.
//
// Invariants, all under b.mu:
//
//   - inflight counts the leaders, at most maxInflight; a slot passes from
//     one leader to the next without being given back.
//   - A call is in b.queue if and only if its caller waits and it is in no
//     batch: a leader reads a call's fields only after taking it from the
//     queue, and its caller reads them only after c.lead says it is answered.
//   - The queue is empty unless inflight == maxInflight (calls queue only
//     then, and a leader gives back its slot only when the queue is empty),
//     so every queued call has a leader ahead of it that will take it or
//     hand it the lead: no call waits forever.
//
// A lone caller never waits: a slot is free, so it leads at once. Time
// spent queued is never a failure: a queued call waits for the round trips
// ahead of it (each bounded by the store's timeout), and only its own round
// trip, or a circuit that opened meanwhile (see send), can fail it. A caller
// whose ctx ends once its call is taken waits for the answer (bounded by the
// timeout), and one handed the lead still leads: the queue depends on it. A
// leader sends a batch of more than its own call without its ctx's
// cancellation, so that no caller's hang-up fails the others.
type batcher struct {
	maxBatch int
	send     func(ctx context.Context, calls []*call) // answers every call

	mu       sync.Mutex
	queue    []*call
	inflight int
}

// A call is one Store operation on the buckets of one key under a policy
// (one Redis key), on its way to Redis.
type call struct {
	key      string
	limits   int // how many of interval and burst are used
	op       int
	n        int64
	interval [store.MaxLimits]int64 // in whole µs
	burst    [store.MaxLimits]int64
	br       *breaker                   // of the node that holds key
	reply    [1 + store.MaxLimits]int64 // allowed, then each limit's µs until full
	sent     time.Time                  // when the round trip that answered it was sent
	err      error
	lead     chan bool // queued calls only, buffered: true = lead, false = answered
}

// maxInflight bounds the batches in flight per store. Two keep the
// connection busy while the next batch gathers; more only make batches
// smaller.
const maxInflight = 2

// do sends c, alone or with others, and returns when c is answered, or
// when ctx ends while c is still queued (c.err is then ctx's error).
func (b *batcher) do(ctx context.Context, c *call) {
	b.mu.Lock()
	if b.inflight < maxInflight {
		b.inflight++
		batch := b.take(c)
		b.mu.Unlock()
		b.lead(ctx, batch)
		return
	}
	c.lead = make(chan bool, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case lead := <-c.lead:
		if lead {
			b.lead(ctx, b.takeLocked(c))
		}
	case <-ctx.Done():
		if b.leave(c) {
			c.err = ctx.Err()
		} else if <-c.lead {
			b.lead(ctx, b.takeLocked(c))
		}
	}
}

// lead sends batch (its leader's call first), then hands the slot to the
// first queued call or gives it back, and tells the others of the batch
// that they are answered.
func (b *batcher) lead(ctx context.Context, batch []*call) {
	if len(batch) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	b.send(ctx, batch)
	b.mu.Lock()
	var next *call
	if len(b.queue) > 0 {
		next = b.queue[0]
		b.dequeue(1)
	} else {
		b.inflight--
	}
	b.mu.Unlock()
	if next != nil {
		next.lead <- true
	}
	for _, m := range batch[1:] {
		m.lead <- false
	}
}

// take returns c followed by queued calls, up to maxBatch, and removes
// those from the queue. b.mu is held.
func (b *batcher) take(c *call) []*call {
	n := min(len(b.queue), b.maxBatch-1)
	if n == 0 {
		return []*call{c}
	}
	batch := append(make([]*call, 0, n+1), c)
	batch = append(batch, b.queue[:n]...)
	b.dequeue(n)
	return batch
}

// takeLocked is take, taking b.mu.
func (b *batcher) takeLocked(c *call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.take(c)
}

// leave removes c from the queue and reports whether it was there.
func (b *batcher) leave(c *call) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// dequeue drops the first n queued calls.
func (b *batcher) dequeue(n int) {
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
}
