package addrlimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit/internal/bucket"
)

// NewTestMemoryStore returns the in-memory tables the Limiter uses, behind
// the Store interface, so that they run the storetest conformance suite and
// can back test stores. Each distinct Policy gets its own table.
func NewTestMemoryStore(maxKeys int) Store {
	return &memoryStore{maxKeys: maxKeys, seed: maphash.MakeSeed(), epoch: time.Now(), tables: map[Policy]*bucket.Table{}}
}

type memoryStore struct {
	maxKeys int
	seed    maphash.Seed
	epoch   time.Time
	mu      sync.Mutex
	tables  map[Policy]*bucket.Table
}

func (m *memoryStore) table(p Policy) (*bucket.Table, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tables[p]
	if t == nil {
		bp, err := bucket.NewPolicy(p.Burst, p.Interval)
		if err != nil {
			panic(err)
		}
		t = bucket.NewTable(bp, m.maxKeys)
		m.tables[p] = t
	}
	return t, int64(time.Since(m.epoch))
}

func (m *memoryStore) Take(_ context.Context, key string, p Policy, n int) (Result, error) {
	t, now := m.table(p)
	return Result(t.Take(maphash.String(m.seed, key), now, int64(n))), nil
}

func (m *memoryStore) Refund(_ context.Context, key string, p Policy, n int) (Result, error) {
	t, now := m.table(p)
	return Result(t.Refund(maphash.String(m.seed, key), now, int64(n))), nil
}

func (m *memoryStore) Peek(_ context.Context, key string, p Policy) (Result, error) {
	t, now := m.table(p)
	return Result(t.Peek(maphash.String(m.seed, key), now)), nil
}

func (m *memoryStore) Reset(_ context.Context, key string, p Policy) error {
	t, now := m.table(p)
	t.Reset(maphash.String(m.seed, key), now)
	return nil
}
