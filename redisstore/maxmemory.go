package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// policyCheckTimeout bounds New's look at the memory policy, unless the
// store's timeout is longer: a connection's set-up costs several round trips.
const policyCheckTimeout = time.Second

// WithEvictionAccepted lets New build a store on a Redis whose
// maxmemory-policy may evict the store's buckets (allkeys-lru,
// volatile-lru and every other allkeys-* and volatile-* policy except
// volatile-ttl), which New refuses otherwise.
//
// On such a Redis the limit is not what it says: once memory is full, Redis
// deletes keys it chooses, and a deleted bucket is a full one, a fresh
// budget for the client that had drained it. With volatile-lru in a Redis
// shared with an application's own keys, the buckets (written with an
// expiry) can be the only keys Redis may evict. The store cannot tell an
// evicted bucket from one that expired full, so nothing at request time
// shows it. Use this option only where that is accepted, such as a shared
// cache whose policy you cannot change for a limit that is a safety net,
// and watch evicted_keys in Redis's INFO stats.
//
// New refuses rather than logs because a log line at start-up is easy to
// miss, and the loss shows only when memory is full, which is when a flood
// of keys is under way: the error and this option put the choice in the
// code, where it is reviewed once. New does not fail when it cannot read
// the policy (CONFIG renamed or refused, as on Amazon ElastiCache, or Redis
// unreachable at start-up), nor when maxmemory is 0, so a fleet never fails
// to start for want of an answer. New checks once: a policy changed later is
// not seen by running stores, and makes the next New fail.
func WithEvictionAccepted() Option {
	return func(s *Store) error {
		s.evictionAccepted = true
		return nil
	}
}

// checkMemoryPolicy returns an error naming every node (each master of a
// Cluster, each shard of a Ring) whose maxmemory-policy may evict buckets,
// unless WithEvictionAccepted. A node that does not answer CONFIG GET is
// not checked.
func (s *Store) checkMemoryPolicy() error {
	if s.evictionAccepted {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, policyCheckTimeout))
	defer cancel()
	var mu sync.Mutex
	var errs []error
	check := func(ctx context.Context, c redis.Cmdable, addr string) {
		if err := evictingPolicy(ctx, c, addr); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	node := func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		if addr == "FailoverClient" { // Sentinel's: the master it reaches is not named
			addr = ""
		}
		check(ctx, c, addr)
		return nil
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, node) // no cluster state: nothing to check
	case *redis.Ring:
		_ = c.ForEachShard(ctx, node)
	case *redis.Client:
		_ = node(ctx, c)
	default:
		check(ctx, c, "")
	}
	return errors.Join(errs...)
}

// evictingPolicy returns an error if the Redis that c reaches has a
// maxmemory and a maxmemory-policy that may evict buckets. Every
// allkeys-* and volatile-* policy may, except volatile-ttl, which evicts
// the keys nearest to expiry first: for a bucket, the one nearest to full,
// whose eviction gives back the least.
func evictingPolicy(ctx context.Context, c redis.Cmdable, addr string) error {
	cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return nil // CONFIG refused or renamed, or no answer: nothing to check
	}
	limit, policy := cfg["maxmemory"], cfg["maxmemory-policy"]
	if limit == "" || limit == "0" || policy == "volatile-ttl" ||
		!strings.HasPrefix(policy, "allkeys-") && !strings.HasPrefix(policy, "volatile-") {
		return nil
	}
	if addr != "" {
		addr = " at " + addr
	}
	return fmt.Errorf("redisstore: the Redis%s has maxmemory %s with maxmemory-policy %s: when memory is full it evicts live buckets, "+
		"and an evicted bucket is a fresh budget for the client that drained it; give the limiter a Redis with maxmemory-policy "+
		"noeviction or volatile-ttl (docs/redis.md, \"Redis configuration\"), or pass redisstore.WithEvictionAccepted() to accept it", addr, limit, policy)
}
