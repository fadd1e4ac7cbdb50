// Package redisstore is an addrlimit.Store in Redis, for a fleet of API
// instances that must share one budget per client.
//
// With N instances behind a load balancer, in-memory limiters give each client
// N times its budget. This store keeps every bucket in Redis instead:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb)
//	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithStore(store), addrlimit.WithExempt(tok.Match))
//
// Each decision is one round trip: a Lua script (EVALSHA, falling back to EVAL
// when Redis lost its script cache) that runs GCRA atomically on one key with
// Redis TIME as the only clock, so instance clocks may disagree. A bucket is
// one integer (its theoretical arrival time in microseconds) under
// prefix+key, written with SET … PX so that it expires as soon as the bucket
// would be full again. Decisions equal those of the in-memory store at
// microsecond resolution (refill intervals are rounded to whole microseconds).
//
// Redis Cluster: every call touches one key, so any key layout works. Keys of
// one client land in one slot only if they share a hash tag: a KeyFunc that
// returns "{user42}:login" and "{user42}:api" co-locates them. Do not put a
// hash tag in the prefix, which would send every bucket to one slot.
//
// Failures: every call has a short timeout (WithTimeout, default 50 ms) and
// returns the error, and the Limiter applies its failure policy
// (addrlimit.WithStoreFailure): by default FailLocal, which decides with an
// in-memory bucket per instance, so clients are still limited during an
// outage (at up to N times the budget across N instances) rather than not at
// all or not served at all; FailOpen and FailClosed (503) are the
// alternatives. Observers see Decision.Degraded and Decision.Err. The store
// keeps no state about the outage: the next call that reaches Redis uses the
// shared budget again.
//
// A local deny cache remembers, per key, until when Redis said the key is
// limited, and denies it locally until then without a round trip, so a
// client's flood becomes no Redis load. This is exact: a denied request
// changes no state.
//
// Exempt requests never reach the store. The Store is safe for concurrent use;
// it never closes the client, which the caller owns.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/redis/go-redis/v9"
)

// gcra is the one script. KEYS[1] is the bucket; ARGV[1] the refill interval
// in whole microseconds, ARGV[2] the burst. It returns {allowed, remaining,
// retry after µs, reset after µs}.
var gcra = redis.NewScript(`
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tau = interval * burst
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call("GET", KEYS[1]))
if not tat or tat < now then
  tat = now
end
local nxt = tat + interval
if nxt - now > tau then
  return {0, 0, nxt - tau - now, tat - now}
end
redis.call("SET", KEYS[1], string.format("%.0f", nxt), "PX", math.ceil((nxt - now) / 1000))
local remaining = math.floor((now + tau - nxt) / interval)
local retry = 0
if remaining == 0 then
  retry = nxt + interval - tau - now
end
return {1, remaining, retry, nxt - now}
`)

// Defaults.
const (
	DefaultPrefix       = "addrlimit:"
	DefaultTimeout      = 50 * time.Millisecond
	DefaultDenyCacheMax = 100_000
	// Keys longer than this are stored as the SHA-256 of the key, so that a
	// custom KeyFunc fed by client input cannot make Redis keys of any size.
	maxRawKey = 200
)

// Store implements addrlimit.Store on Redis.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	deny    *denyCache // nil when disabled
}

// An Option configures New.
type Option func(*Store) error

// WithKeyPrefix sets the prefix of every Redis key (default "addrlimit:").
// Give limiters with different policies different prefixes.
func WithKeyPrefix(p string) Option {
	return func(s *Store) error {
		s.prefix = p
		return nil
	}
}

// WithTimeout bounds each call to Redis, round trip included; it must be
// positive. The default, 50 ms, is far above a healthy round trip inside one
// region (about 0.1–1 ms) and short enough that an outage costs each request
// little before the failure policy decides.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: timeout must be positive, got %v", d)
		}
		s.timeout = d
		return nil
	}
}

// WithDenyCache sets how many limited keys the local deny cache remembers
// (default 100,000); 0 disables it.
func WithDenyCache(maxKeys int) Option {
	return func(s *Store) error {
		if maxKeys < 0 {
			return fmt.Errorf("redisstore: deny cache size must not be negative, got %d", maxKeys)
		}
		s.deny = newDenyCache(maxKeys)
		return nil
	}
}

// New returns a store that keeps buckets in client. The caller owns client;
// the store never closes it. A go-redis client must be configured with
// ContextTimeoutEnabled: true, so that the per-call timeout bounds network
// reads; New rejects one that is not.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if !contextTimeouts(client) {
		return nil, errors.New("redisstore: the client must have ContextTimeoutEnabled: true in its options; otherwise go-redis ignores the per-call timeout and waits for its ReadTimeout (3 s by default) when Redis hangs")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, deny: newDenyCache(DefaultDenyCacheMax)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: option %d is nil", i+1)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Take implements addrlimit.Store: one round trip, or none when the deny
// cache already knows the key is limited. Errors (including the timeout)
// wrap the Redis error and start with "redisstore: ".
func (s *Store) Take(ctx context.Context, key string, p addrlimit.Policy) (addrlimit.Result, error) {
	if p.Burst < 1 || p.Interval <= 0 {
		return addrlimit.Result{}, fmt.Errorf("redisstore: invalid policy %+v", p)
	}
	rkey := s.redisKey(key)
	if res, ok := s.deny.lookup(rkey, time.Now()); ok {
		return res, nil
	}
	interval := max(p.Interval.Round(time.Microsecond)/time.Microsecond, 1)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := gcra.Run(ctx, s.client, []string{rkey}, int64(interval), p.Burst).Int64Slice()
	if err != nil {
		return addrlimit.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	if len(v) != 4 {
		return addrlimit.Result{}, fmt.Errorf("redisstore: script returned %d values, want 4", len(v))
	}
	res := addrlimit.Result{
		Allowed:    v[0] == 1,
		Remaining:  int(v[1]),
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
	}
	if !res.Allowed {
		s.deny.remember(rkey, time.Now(), res)
	}
	return res, nil
}

// contextTimeouts reports whether a go-redis client applies context
// deadlines to network reads. Other UniversalClient implementations are
// trusted to.
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// RedisKey returns the Redis key that holds key's bucket.
func (s *Store) RedisKey(key string) string { return s.redisKey(key) }

func (s *Store) redisKey(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return s.prefix + "sha256:" + hex.EncodeToString(sum[:])
	}
	return s.prefix + key
}

// DenyCacheLen returns the number of keys the deny cache holds.
func (s *Store) DenyCacheLen() int { return s.deny.len() }

var _ addrlimit.Store = (*Store)(nil)
