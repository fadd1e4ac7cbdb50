package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A call is one Store operation on one Redis key, on its way to Redis.
type call struct {
	key                string
	op                 int
	n, interval, burst int64    // interval in whole µs
	br                 *breaker // of the node that holds key
	reply              [argsPerKey]int64
	sent               time.Time // when the round trip that answered it was sent
	err                error
	state              atomic.Int32
	lead               chan bool // buffered: true = lead the next batch, false = answered
}

// States of a queued call. Only queued calls change state, by CAS: the
// waiting caller abandons it, or a leader claims it for its batch or hands it
// the lead.
const (
	queued int32 = iota
	claimed
	leading
	abandoned
)

// A batcher sends concurrent calls to Redis together. At most maxInflight
// script calls (or pipelines) are in flight; a call that arrives while they
// are queues, and the next leader (a queued caller handed the lead when a
// batch returns) sends every queued call, up to maxBatch, in one round trip:
// one script call per hash slot. A lone caller never waits: at one caller
// every call is sent at once, as without batching. Time spent queued is never
// a failure: a queued call waits for the round trips ahead of it (each bounded
// by the store's timeout), and only its own round trip can fail it.
type batcher struct {
	maxBatch int
	send     func(ctx context.Context, calls []*call) // answers every call

	mu       sync.Mutex
	queue    []*call
	inflight int
}

// maxInflight bounds the batches in flight per store. Two keep the
// connection busy while the next batch gathers; more only makes batches
// smaller (measured: 1, 2 and 4 within noise of each other at 64 callers).
const maxInflight = 2

// do sends c, alone or with others, and returns when c is answered. A
// queued call waits until a round trip takes it; only ctx ends the wait
// early (c.err is then the context's error). Once sent, it waits for the
// answer, which the sender's timeout bounds.
func (b *batcher) do(ctx context.Context, c *call) {
	b.mu.Lock()
	if b.inflight < maxInflight {
		b.inflight++
		batch := b.claim([]*call{c})
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
			b.lead(ctx, b.claimLocked(c))
		}
	case <-ctx.Done():
		if c.state.CompareAndSwap(queued, abandoned) {
			c.err = ctx.Err()
			return
		}
		// Claimed: the answer comes within the sender's timeout. Leading:
		// the queue depends on this caller to send the next batch.
		if <-c.lead {
			b.lead(ctx, b.claimLocked(c))
		}
	}
}

// claimLocked returns c with the queued calls, as claim, taking b.mu.
func (b *batcher) claimLocked(c *call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.claim([]*call{c})
}

// lead sends batch (its leader first), then hands the lead to the next
// queued call or gives up its in-flight slot.
func (b *batcher) lead(ctx context.Context, batch []*call) {
	if len(batch) > 1 {
		// The others must not fail because the leader's caller gave up.
		ctx = context.WithoutCancel(ctx)
	}
	b.send(ctx, batch)
	b.mu.Lock()
	next := b.handOff()
	if next == nil {
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

// claim moves queued calls into batch, up to maxBatch. b.mu is held.
func (b *batcher) claim(batch []*call) []*call {
	i := 0
	for ; i < len(b.queue) && len(batch) < b.maxBatch; i++ {
		if m := b.queue[i]; m.state.CompareAndSwap(queued, claimed) {
			batch = append(batch, m)
		}
	}
	b.dequeue(i)
	return batch
}

// handOff picks the first live queued call to lead the next batch. b.mu is
// held.
func (b *batcher) handOff() *call {
	for i, m := range b.queue {
		if m.state.CompareAndSwap(queued, leading) {
			b.dequeue(i + 1)
			return m
		}
	}
	b.dequeue(len(b.queue))
	return nil
}

// dequeue drops the first n queued calls.
func (b *batcher) dequeue(n int) {
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
}
