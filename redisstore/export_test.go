package redisstore

import "time"

// QueuedCalls returns how many calls wait for a batch.
func (s *Store) QueuedCalls() int {
	if s.batch == nil {
		return 0
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}

// WithClock makes the script take the time from now instead of Redis TIME,
// so that the conformance suite can run in a synctest bubble, unaffected by
// how slow a loaded machine is. Keys then expire an hour late.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		s.clock = now
		return nil
	}
}

// Probing reports whether a prober goroutine runs for the store's single
// breaker (not a Cluster's per-node ones).
func (s *Store) Probing() bool { return s.single.probing.Load() }
