package redisstore

// QueuedCalls returns how many calls wait for a batch.
func (s *Store) QueuedCalls() int {
	if s.batch == nil {
		return 0
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}
