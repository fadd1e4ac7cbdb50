package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrCircuitOpen is the error of every call made while the circuit breaker
// of the Redis node it needs is open: after consecutive failures the store
// stops asking that node and fails at once, so the Limiter's failure policy
// decides without waiting for a timeout. Test for it with errors.Is; the
// error returned also wraps the failure that opened the circuit.
var ErrCircuitOpen = errors.New("redisstore: circuit open, Redis not asked")

// Breaker defaults.
const (
	DefaultBreakerFailures = 3
	DefaultProbeEvery      = 500 * time.Millisecond
	// A prober that nobody has needed for this long stops and closes its
	// circuit (a node that left the cluster, an instance gone idle): the next
	// call asks Redis again and reopens it if Redis is still down.
	probeIdle = time.Minute
)

// A breaker guards one Redis node. Closed, calls go to Redis and count
// consecutive outage failures; at the threshold it opens and starts one
// prober goroutine, which connects to the node every probeEvery, with the
// connect timeout (opening a connection takes several round trips), and
// closes the circuit (and exits) at the first answer, leaving the
// connections it opened for the calls. On a Cluster, the prober of a node
// that no longer masters any slot (a replica took over) closes the circuit
// and exits: calls already go to the new master. Open, calls fail at once
// with the error in open. No goroutine runs while the circuit is closed.
type breaker struct {
	threshold      int32
	probeEvery     time.Duration
	connectTimeout time.Duration
	connect        func(ctx context.Context) error // opens connections to the node
	gone           func(ctx context.Context) bool  // Cluster: reloads the slot map, reports the node masters no slot; nil otherwise
	idle           func(pipelined bool) int        // idle connections in the node's pool; nil if unknown

	failures    atomic.Int32
	unreachable atomic.Bool           // since its last answer, the node refused a dial or failed a round trip that had the longer timeout
	roundTrips  atomic.Int32          // round trips to the node in flight (mustConnect to their end)
	open        atomic.Pointer[error] // nil while closed
	probing     atomic.Bool           // the prober goroutine runs
	lastUsed    atomic.Int64          // unix ns of the last call refused while open
}

// check returns the open circuit's error, or nil when calls may go to Redis.
func (b *breaker) check() error {
	e := b.open.Load()
	if e == nil {
		return nil
	}
	b.lastUsed.Store(time.Now().UnixNano())
	return *e
}

// record counts the outcome of one round trip to the node: err is nil, or
// the error that says Redis failed. parent is the context the round trip
// was sent with, before the store's timeout: one its caller gave up on says
// nothing about Redis.
func (b *breaker) record(parent context.Context, err error) {
	switch {
	case err == nil:
		if b.failures.Load() != 0 {
			b.failures.Store(0)
			b.unreachable.Store(false)
		}
	case parent.Err() != nil || !isOutage(err):
	case b.countFailure(err) >= b.threshold:
		e := fmt.Errorf("%w (after %d consecutive failures, the last: %w)", ErrCircuitOpen, b.threshold, err)
		if b.open.CompareAndSwap(nil, &e) {
			b.lastUsed.Store(time.Now().UnixNano())
			b.probing.Store(true)
			go b.probe()
		}
	}
}

// countFailure counts the outage err, noting whether it was a failure to
// dial the node, and returns the consecutive failures.
func (b *breaker) countFailure(err error) int32 {
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		b.unreachable.Store(true)
	}
	return b.failures.Add(1)
}

// mustConnect counts one more round trip to the node in flight (the caller
// counts it off at its end) and reports whether it may have to open a
// connection first, and the node is not unreachable: opening one takes
// go-redis several round trips, dialing one that is refused takes it as
// long as it is given, retrying, so the longer timeout is granted once per
// outage. A round trip may have to when the pool
// holds fewer idle connections than round trips are in flight: those that
// have not taken theirs yet, unknown, are counted as still to take one.
func (b *breaker) mustConnect(pipelined bool) bool {
	n := b.roundTrips.Add(1)
	return b.idle != nil && !b.unreachable.Load() && b.idle(pipelined) < int(n)
}

// probe connects to the node until it answers (or, on a Cluster, until it
// masters no slot), then closes the circuit. The slot map is reloaded at
// once too: a replica may have taken over before the circuit opened.
func (b *breaker) probe() {
	if b.gone != nil && b.tryGone() {
		b.close()
		return
	}
	t := time.NewTicker(b.probeEvery)
	defer t.Stop()
	for now := range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), b.connectTimeout)
		done := b.gone != nil && b.gone(ctx) || b.connect(ctx) == nil
		cancel()
		if done || now.Sub(time.Unix(0, b.lastUsed.Load())) > probeIdle {
			b.close()
			return
		}
	}
}

// tryGone reports whether b.gone finds the node gone, within the connect
// timeout.
func (b *breaker) tryGone() bool {
	ctx, cancel := context.WithTimeout(context.Background(), b.connectTimeout)
	defer cancel()
	return b.gone(ctx)
}

// close closes the circuit; the prober calls it as it exits. In this
// order: the circuit can open again (and start a new prober) only once this
// one no longer counts as running.
func (b *breaker) close() {
	b.probing.Store(false)
	b.failures.Store(0)
	b.unreachable.Store(false)
	b.open.Store(nil)
}

// isOutage reports whether err means Redis (or the way to it) is down, as
// opposed to an answer about this one call.
func isOutage(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true // network error, timeout, closed pool
	}
	// OOM: a Redis at maxmemory under noeviction refuses every write,
	// whichever key it is for.
	for _, p := range []string{"CLUSTERDOWN", "LOADING", "MASTERDOWN", "BUSY", "TRYAGAIN", "OOM"} {
		if strings.HasPrefix(reply.Error(), p) {
			return true
		}
	}
	return false
}
