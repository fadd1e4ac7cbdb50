package redisstore

import (
	"context"
	"time"

	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// QueuedCalls returns how many calls wait for a batch.
func (s *Store) QueuedCalls() int {
	if s.batch == nil {
		return 0
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}

// argvClock makes the script take the time from its last ARGV, and keep
// keys an hour longer (Redis still expires them on its own clock).
const argvClock = `local now, slack = tonumber(ARGV[#ARGV]), 3600000`

// WithClock makes the store use a script that takes the time from now
// instead of Redis TIME, so that the conformance suite can run in a synctest
// bubble, unaffected by how slow a loaded machine is. Keys then expire an
// hour late.
func WithClock(now func() time.Time) Option {
	sc := &script{Script: redis.NewScript(argvClock + gcraBody), clock: now}
	in := &script{Script: redis.NewScript(argvClock + inflightBody), clock: now}
	return func(s *Store) error {
		s.script, s.inflight = sc, in
		return nil
	}
}

// Probing reports whether a prober goroutine runs for the store's single
// breaker (not a Cluster's per-node ones).
func (s *Store) Probing() bool { return s.single.probing.Load() }

// RunScript runs the store's production script on Redis with raw ARGV.
func RunScript(ctx context.Context, c redis.Scripter, key string, args ...any) error {
	return gcra.Run(ctx, c, []string{key}, args...).Err()
}

// LeaseKey returns the Redis key of l's in-flight slots.
func (s *Store) LeaseKey(l store.Lease) (string, error) { return s.leaseKey(l) }
