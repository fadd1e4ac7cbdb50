// Package redisstore is an store.Store in Redis, so that a fleet of
// instances shares one budget per client. It takes a go-redis v9 client
// (import "github.com/redis/go-redis/v9"):
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb)
//	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithStore(store), addrlimit.WithInternalToken(tok))
//
// # Decisions
//
// Each decision runs GCRA atomically in a Lua script with Redis TIME as the
// only clock, so instance clocks need not agree; it equals the in-memory
// store's decision at microsecond resolution (refill intervals are rounded
// to whole microseconds). A policy of several limits is decided in the same
// script call, all or nothing: one Redis TIME reading for every limit, each
// checked before any is charged. A key's buckets under a policy are one
// Redis key, which expires once every bucket is full again. Concurrent
// calls share round trips (WithMaxBatch); a lone call is sent at once. A key
// whose value Redis cannot use (a value of another type) fails its own
// calls only.
//
// # Keys
//
// The Redis key of a key's buckets under a policy is
//
//	prefix + policy name + "/" + burst + "/" + interval in ns + ":k:" + key
//
// with "/" + burst + "/" + interval in ns for each limit, in order, so
// policies that differ in name or in any limit's burst or interval never
// share a bucket, and instances with equal policies share every bucket. A key longer than
// 200 bytes is replaced by its SHA-256, under ":h:" + hex, a namespace no
// literal key reaches. In a Redis Cluster any key layout works (a decision,
// whatever its limits, touches one key); keys with one hash tag
// ("{user42}:login", "{user42}:api") share a slot, so a hash tag in the
// prefix would put every bucket in one slot.
//
// # In-flight slots
//
// The Store is an store.InFlightStore: a key's slots under a policy
// are one sorted set ("/inflight" after the policy name, then the client
// part as above), one lease per running request, scored with its expiry
// in Redis TIME (WithLeaseTime). Acquire is one script call, Release one
// ZREM, and Renew one round trip for every lease it is given; a lease
// nobody renews lapses, so an instance that dies gives its slots back
// within the lease time.
//
// # Redis configuration
//
// The limit holds only if Redis never deletes a bucket in use: a deleted
// bucket is a full one. Give the store a Redis of its own, with a maxmemory
// sized for its buckets (166–190 B each) and maxmemory-policy noeviction
// or volatile-ttl; New refuses the other evicting policies (see
// WithEvictionAccepted). Under noeviction a full Redis refuses the script's
// writes with OOM, which the store treats as an outage (see WithBreaker).
//
// # Failures
//
// Every round trip is bounded by WithTimeout; the time a call waits for a
// shared round trip is not, and is never a failure. go-redis opens a
// connection inside the call that needs it (TCP, HELLO, CLIENT SETINFO:
// several round trips), so a round trip to a node with no idle connection
// in its pool is bounded by 4 × WithTimeout instead. A failed call returns
// an error starting with "redisstore: ", and the Limiter's failure policy
// (addrlimit.WithStoreFailure) decides. After consecutive failed round trips
// to a Redis node (WithBreaker), calls that need the node fail at once with
// ErrCircuitOpen until a background probe gets an answer; on a Cluster, the
// probe also reloads the slot map, so that calls follow a replica that took
// over the node's slots. No goroutine runs while Redis is healthy, and
// nothing needs closing.
//
// A local deny cache (WithDenyCache) denies without a round trip every Take
// that Redis's last denial of the key proves cannot be paid yet. It forgets
// a denial after one refill interval, or at once on a Refund or Reset
// through this store.
//
// The Store is safe for concurrent use and never closes the client, which
// the caller owns. Measurements and deployment notes (Cluster, Sentinel,
// outages) are in docs/redis.md.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// Defaults.
const (
	DefaultPrefix       = "addrlimit:"
	DefaultTimeout      = 50 * time.Millisecond
	DefaultDenyCacheMax = 100_000
	DefaultMaxBatch     = 128
	// Keys longer than this are stored as the SHA-256 of the key, so that a
	// custom KeyFunc fed by client input cannot make Redis keys of any size.
	maxRawKey = 200
	// maxTau bounds burst × interval in µs (about 35 years), so that the
	// script's doubles hold every time exactly.
	maxTau = 1 << 50
)

// Store implements store.Store on Redis.
type Store struct {
	client     redis.UniversalClient
	cluster    *redis.ClusterClient // nil unless client is one
	prefix     string
	timeout    time.Duration
	deny       *denyCache // nil when disabled
	failures   int
	probeEvery time.Duration
	batch      *batcher // nil when batching is off
	script     *script  // gcra; tests may set another clock
	inflight   *script  // in-flight slots, on the same clock as script
	lease      time.Duration

	single   *breaker // the breaker unless cluster
	breakers sync.Map // cluster: node address → *breaker

	evictionAccepted bool // WithEvictionAccepted

	// prepared holds the policies validated so far, by name (see prepare).
	prepared atomic.Pointer[map[string]*preparedPolicy]
}

// An Option configures New.
type Option func(*Store) error

// WithKeyPrefix sets the prefix of every Redis key (default "addrlimit:").
// Policies already have distinct keys; a prefix separates applications
// that share one Redis.
func WithKeyPrefix(p string) Option {
	return func(s *Store) error {
		s.prefix = p
		return nil
	}
}

// WithTimeout bounds each round trip to Redis (default 50 ms); it must be
// positive. Set it well above a healthy round trip to your Redis. The time a
// call waits for a shared round trip is not part of it and never a failure.
// A round trip that must first open a connection (none is idle in the
// go-redis pool of its node: at start, after a failure) is bounded by 4 ×
// the timeout, and so is the breaker's probe: opening a connection takes
// go-redis several round trips. A node gets that once per outage: after it
// refused a connection or failed such a round trip, not again until it
// answers.
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

// WithBreaker sets the circuit breaker: a node's circuit opens after
// failures consecutive round trips to it failed for want of Redis (network
// errors, a round trip that outlived the timeout, CLUSTERDOWN, LOADING, OOM and
// the like; never the time a call spent queued for a batch, an error about
// one key's value, or the caller's own context ending), and while open a
// background probe connects to the node every probeEvery (with 4 × the
// timeout, see WithTimeout) and closes the circuit at its first answer. On
// a Cluster the probe also reloads the slot map each time, and closes the
// circuit of a node that masters no slot any more: once a replica took over,
// calls go to it. failures must be at least 1 and probeEvery at least 1 ms.
// Defaults: 3 and 500 ms.
func WithBreaker(failures int, probeEvery time.Duration) Option {
	return func(s *Store) error {
		if failures < 1 || failures > 1<<20 {
			return fmt.Errorf("redisstore: breaker failures must be between 1 and 1048576, got %d", failures)
		}
		if probeEvery < time.Millisecond {
			return fmt.Errorf("redisstore: breaker probe interval must be at least 1ms, got %v", probeEvery)
		}
		s.failures, s.probeEvery = failures, probeEvery
		return nil
	}
}

// WithMaxBatch sets how many concurrent calls one round trip may carry
// (default 128); 1 turns batching off, so that every call is its own round
// trip. With a *redis.Client a batch is one script call; with other clients
// (Cluster, Ring, wrappers) it is one script call per call, in one pipeline.
func WithMaxBatch(n int) Option {
	return func(s *Store) error {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("redisstore: max batch must be between 1 and 10000, got %d", n)
		}
		s.batch = &batcher{maxBatch: n}
		return nil
	}
}

// New returns a store that keeps buckets in client. The caller owns client;
// the store never closes it. A go-redis client must be configured with
// ContextTimeoutEnabled: true, so that the per-call timeout bounds network
// reads, and without MinIdleConns, whose connections would open inside a
// decision (see WithTimeout); New rejects one that is not. New also reads
// Redis's maxmemory and maxmemory-policy (CONFIG GET, on every master of a
// Cluster, within the timeout or one second, whichever is longer) and
// refuses a Redis that may evict buckets, unless WithEvictionAccepted (see
// there for why). A Redis that refuses CONFIG or does not answer is not
// checked; New then returns after that bound at most.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	contextTimeouts, minIdleConns := clientOptions(client)
	if !contextTimeouts {
		return nil, errors.New("redisstore: the client must have ContextTimeoutEnabled: true in its options; otherwise go-redis ignores the per-call timeout and waits for its ReadTimeout (3 s by default) when Redis hangs")
	}
	if minIdleConns > 0 {
		return nil, fmt.Errorf("redisstore: the client must have MinIdleConns 0, got %d: go-redis opens those connections without their handshake (HELLO, CLIENT SETINFO), which then runs inside a decision's timeout, on a slow link every decision's; the store opens the connections it needs itself, with a longer timeout", minIdleConns)
	}
	s := &Store{
		client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, deny: newDenyCache(DefaultDenyCacheMax),
		failures: DefaultBreakerFailures, probeEvery: DefaultProbeEvery, batch: &batcher{maxBatch: DefaultMaxBatch},
		script: gcra, inflight: inflight, lease: DefaultLeaseTime,
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: option %d is nil", i+1)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.batch.maxBatch == 1 {
		s.batch = nil
	} else {
		s.batch.send = s.send
	}
	s.cluster, _ = client.(*redis.ClusterClient)
	s.single = s.newBreaker(client)
	if err := s.checkMemoryPolicy(); err != nil {
		return nil, err
	}
	return s, nil
}

// newBreaker returns a breaker for the node that c reaches: all of Redis,
// or one Cluster node.
func (s *Store) newBreaker(c redis.UniversalClient) *breaker {
	_, single := s.client.(*redis.Client)
	b := &breaker{
		threshold: int32(s.failures), probeEvery: s.probeEvery, connectTimeout: connectFactor * s.timeout,
		connect: func(ctx context.Context) error { return s.connect(ctx, c, !single) },
	}
	if node, ok := c.(*redis.Client); ok {
		b.idle = func(pipelined bool) int { return idleConns(node, pipelined) }
	}
	return b
}

// connectFactor × WithTimeout bounds a round trip that opens a connection,
// and a probe: go-redis opens a connection inside the call that needs it,
// with a TCP handshake, HELLO and CLIENT SETINFO (and TLS, if used) before
// the command, several round trips where a call has room for about one.
const connectFactor = 4

// idleConns returns how many idle connections c's pool holds: the main
// pool, or, for a pipeline, the pipeline pool (the main one if c has none).
func idleConns(c *redis.Client, pipelined bool) int {
	st := c.PoolStats()
	if pipelined && st.PipelineStats != nil {
		return int(st.PipelineStats.IdleConns)
	}
	return int(st.IdleConns)
}

// connect opens the connections that the store's round trips to c use at
// once (maxInflight, and as many for pipelines), each with a command that
// needs an answer; one of them loads the script. Any answer from Redis
// (one that is not an outage) is success: the node serves.
func (s *Store) connect(ctx context.Context, c redis.UniversalClient, pipelines bool) error {
	n := maxInflight
	if pipelines {
		n *= 2
	}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			switch {
			case i == 0:
				errs <- s.script.Load(ctx, c).Err()
			case i < maxInflight:
				errs <- c.Ping(ctx).Err()
			default:
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Ping(ctx)
					return nil
				})
				errs <- err
			}
		}()
	}
	answered, failed := false, error(nil)
	for range n {
		switch err := <-errs; {
		case err == nil || !isOutage(err):
			answered = true
		case failed == nil:
			failed = err
		}
	}
	if answered {
		return nil
	}
	return failed
}

// CheckPolicy implements store.PolicyChecker: it refuses a policy with
// a limit whose burst × interval exceeds 2^50 µs (about 35.7 years), the
// bound of the script's exact arithmetic, or that Policy.Validate refuses.
// A policy with an in-flight limit and no rate limit has no buckets here,
// only leases: it passes if Validate passes it (Take refuses it).
func (s *Store) CheckPolicy(p addrlimit.Policy) error {
	if len(p.Limits) == 0 {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		return nil
	}
	_, err := s.prepare(p)
	return err
}

// Take implements store.Store: n from every limit of p or from none, in
// one round trip (shared with concurrent calls), or none when the deny cache
// already knows that some limit of the key cannot pay n yet. Errors
// (including the timeout and an open circuit) start with "redisstore: ".
func (s *Store) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	return s.do(ctx, key, p, opTake, n)
}

// Refund implements store.Store: it gives n tokens back to each of key's
// buckets, none above full, and drops key from the deny cache.
func (s *Store) Refund(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	return s.do(ctx, key, p, opRefund, n)
}

// Peek implements store.Store: it reports key's buckets without
// changing them. It always asks Redis.
func (s *Store) Peek(ctx context.Context, key string, p addrlimit.Policy) (store.Result, error) {
	return s.do(ctx, key, p, opPeek, 1)
}

// Reset implements store.Store: it deletes key's buckets (full
// buckets) and drops key from the deny cache.
func (s *Store) Reset(ctx context.Context, key string, p addrlimit.Policy) error {
	_, err := s.do(ctx, key, p, opReset, 1)
	return err
}

func (s *Store) do(ctx context.Context, key string, p addrlimit.Policy, op, n int) (store.Result, error) {
	pp, err := s.prepare(p)
	if err != nil {
		return store.Result{}, err
	}
	// q is p as the script runs it: intervals in whole µs.
	q := addrlimit.Policy{Name: p.Name, Limits: pp.lims[:len(p.Limits)]}
	for _, lim := range q.Limits {
		if n < 1 || n > lim.Burst {
			return store.Result{}, fmt.Errorf("redisstore: %d tokens for a burst of %d", n, lim.Burst)
		}
	}
	rkey := s.redisKey(key, p)
	c := &call{key: rkey, limits: len(q.Limits), op: op, n: int64(n)}
	switch op {
	case opTake:
		if res, ok := s.deny.lookup(rkey, time.Now(), n, q); ok {
			return res, nil
		}
	case opRefund, opReset:
		// Forget before the call too: a Take answered meanwhile must not
		// keep a denial from before the refund.
		s.deny.forget(rkey)
	}
	if err := ctx.Err(); err != nil {
		return store.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	br := s.breakerFor(ctx, rkey)
	if err := br.check(); err != nil {
		return store.Result{}, err
	}
	c.br = br
	for i, lim := range q.Limits {
		c.interval[i], c.burst[i] = int64(lim.Interval/time.Microsecond), int64(lim.Burst)
	}
	if s.batch != nil {
		s.batch.do(ctx, c)
	} else {
		s.send(ctx, []*call{c})
	}
	if c.err != nil {
		return store.Result{}, fmt.Errorf("redisstore: %w", c.err)
	}
	var resets [store.MaxLimits]time.Duration
	for i := range q.Limits {
		resets[i] = time.Duration(c.reply[1+i]) * time.Microsecond
	}
	take := op == opTake || op >= opTakeDebt // with or without a debt
	need := 1
	if take && c.reply[0] != 1 {
		need = n
	}
	res := q.Result(c.reply[0] == 1, need, resets)
	switch {
	case take:
		s.deny.remember(rkey, c.sent, res, n, q)
	case op == opRefund || op == opReset:
		s.deny.forget(rkey)
		res.Allowed = res.Remaining >= 1
	default: // Peek
		res.Allowed = res.Remaining >= 1
	}
	return res, nil
}

// send makes one round trip for calls: one script call for a single Redis,
// one per call, pipelined, for other clients. Calls whose circuit opened while they
// were queued fail at once. The round trip counts once for the breaker of
// each node it reached: a failure if a call to that node failed for want of
// Redis, a success otherwise.
func (s *Store) send(ctx context.Context, calls []*call) {
	var live []*call // nil while every call is live: no allocation
	for i, c := range calls {
		switch c.err = c.br.check(); {
		case c.err != nil && live == nil:
			live = append(make([]*call, 0, len(calls)), calls[:i]...)
		case c.err == nil && live != nil:
			live = append(live, c)
		}
	}
	if live != nil {
		calls = live
	}
	if len(calls) == 0 {
		return
	}
	s.roundTrip(ctx, calls)
	for _, c := range calls[1:] {
		if c.br != calls[0].br {
			recordPerNode(ctx, calls)
			return
		}
	}
	calls[0].br.record(ctx, outage(calls))
}

// recordPerNode records one round trip's outcome for each node it reached.
func recordPerNode(ctx context.Context, calls []*call) {
	byNode := make(map[*breaker][]*call)
	for _, c := range calls {
		byNode[c.br] = append(byNode[c.br], c)
	}
	for br, calls := range byNode {
		br.record(ctx, outage(calls))
	}
}

// outage returns the first error of calls that means Redis failed, or nil.
func outage(calls []*call) error {
	for _, c := range calls {
		if c.err != nil && isOutage(c.err) {
			return c.err
		}
	}
	return nil
}

// roundTrip sends calls to Redis and stores each call's answer or error.
// It is bounded by the store's timeout, or by connectFactor times that if a
// node it needs may have no idle connection left for it: go-redis then
// opens one first. A node that fails such a round trip gets no longer
// timeout again until it answers (breaker.unreachable).
func (s *Store) roundTrip(ctx context.Context, calls []*call) {
	_, single := s.client.(*redis.Client)
	pipelined := !single && len(calls) > 1
	var buf [4]*breaker
	nodes := buf[:0]
	for _, c := range calls {
		if !slices.Contains(nodes, c.br) {
			nodes = append(nodes, c.br)
		}
	}
	timeout, extended := s.startRoundTrip(nodes, pipelined)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	now := time.Now()
	for _, c := range calls {
		c.sent = now
	}
	if pipelined {
		// A Cluster's keys are in different slots, maybe on different nodes.
		s.script.runPipelined(rctx, s.client, calls)
	} else {
		s.script.run(rctx, s.client, calls)
	}
	cancel()
	endRoundTrip(nodes)
	if extended && ctx.Err() == nil {
		for _, c := range calls {
			if c.err != nil && isOutage(c.err) {
				c.br.unreachable.Store(true)
			}
		}
	}
}

// startRoundTrip counts one more round trip in flight to each of nodes
// (endRoundTrip counts it off) and returns its bound: the store's timeout,
// or connectFactor times that, reported as extended, if a node may have
// to open a connection first (see breaker.mustConnect).
func (s *Store) startRoundTrip(nodes []*breaker, pipelined bool) (timeout time.Duration, extended bool) {
	for _, b := range nodes {
		if b.mustConnect(pipelined) { // on every node: it counts the round trip
			extended = true
		}
	}
	if extended {
		return connectFactor * s.timeout, true
	}
	return s.timeout, false
}

// endRoundTrip counts off the round trip that startRoundTrip counted.
func endRoundTrip(nodes []*breaker) {
	for _, b := range nodes {
		b.roundTrips.Add(-1)
	}
}

// breakerFor returns the breaker of the node that holds rkey: the one
// breaker of a single Redis, or the breaker of the key's master in a Cluster.
func (s *Store) breakerFor(ctx context.Context, rkey string) *breaker {
	if s.cluster == nil {
		return s.single
	}
	node, err := s.cluster.MasterForKey(ctx, rkey)
	if err != nil {
		return s.single // no cluster state: the cluster as a whole is the node
	}
	addr := node.Options().Addr
	if b, ok := s.breakers.Load(addr); ok {
		return b.(*breaker)
	}
	b := s.newBreaker(node)
	b.gone = func(ctx context.Context) bool {
		if !s.masterGone(ctx, addr) {
			return false
		}
		s.breakers.CompareAndDelete(addr, b)
		return true
	}
	actual, _ := s.breakers.LoadOrStore(addr, b)
	return actual.(*breaker)
}

// masterGone reloads the Cluster's slot map and reports whether it has no
// master at addr any more (a replica took over its slots). It reports
// false when the slot map cannot be loaded.
func (s *Store) masterGone(ctx context.Context, addr string) bool {
	var found atomic.Bool
	err := s.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			found.Store(true)
		}
		return nil
	})
	return err == nil && !found.Load()
}

// preparedPolicy is a policy validated once: as given (to recognise it),
// and as the script runs it.
type preparedPolicy struct {
	limits []addrlimit.Limit                // a copy of the policy's Limits
	lims   [store.MaxLimits]addrlimit.Limit // intervals in whole µs (at least 1)
}

// maxPrepared bounds the policies prepare remembers; past it, each call of
// a new policy is validated again (a Limiter has a few policies: only a
// direct caller with many names gets there).
const maxPrepared = 64

// prepare returns p validated and as the script runs it. A policy is
// validated once: New's CheckPolicy, or the first call that names it, and
// later calls that give the same name and limits find it without
// allocating. (Policy.Validate builds the name of each of several limits,
// which a call per decision would pay for.)
func (s *Store) prepare(p addrlimit.Policy) (*preparedPolicy, error) {
	if m := s.prepared.Load(); m != nil {
		if pp := (*m)[p.Name]; pp != nil && slices.Equal(pp.limits, p.Limits) {
			return pp, nil
		}
	}
	pp, err := checkPolicy(p)
	if err != nil {
		return nil, err
	}
	for {
		old := s.prepared.Load()
		if old != nil && len(*old) >= maxPrepared {
			return pp, nil
		}
		m := make(map[string]*preparedPolicy, 1)
		if old != nil {
			maps.Copy(m, *old)
		}
		m[p.Name] = pp
		if s.prepared.CompareAndSwap(old, &m) {
			return pp, nil
		}
	}
}

// checkPolicy validates p and returns it prepared: its limits with each
// refill interval rounded to whole microseconds (at least 1 µs), as the
// script runs them.
func checkPolicy(p addrlimit.Policy) (*preparedPolicy, error) {
	pp := &preparedPolicy{limits: slices.Clone(p.Limits)}
	// The Limiter's one rule for a policy. The empty name, which a Limiter
	// never passes, is a namespace of its own for direct callers.
	if p.Name != "" {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
	}
	if len(p.Limits) == 0 {
		return nil, fmt.Errorf("redisstore: policy %q: has no rate limit: no buckets", p.Name)
	}
	if len(p.Limits) > store.MaxLimits {
		return nil, fmt.Errorf("redisstore: policy %q: has %d limits, not 1 to %d", p.Name, len(p.Limits), store.MaxLimits)
	}
	for i, lim := range p.Limits {
		if lim.Burst < 1 || lim.Interval <= 0 {
			return nil, fmt.Errorf("redisstore: invalid policy: burst %d, interval %v", lim.Burst, lim.Interval)
		}
		lim.Interval = max(lim.Interval.Round(time.Microsecond), time.Microsecond)
		if int64(lim.Burst) > maxTau/int64(lim.Interval/time.Microsecond) {
			return nil, fmt.Errorf("redisstore: policy %q: burst %d × interval %v must be at most 2^50 µs (about 35.7 years), the longest bucket the script computes exactly", p.Name, lim.Burst, p.Limits[i].Interval)
		}
		pp.lims[i] = lim
	}
	return pp, nil
}

// clientOptions reports whether a go-redis client applies context
// deadlines to network reads, and its MinIdleConns. Other UniversalClient
// implementations are trusted to, with none.
func clientOptions(c redis.UniversalClient) (contextTimeouts bool, minIdleConns int) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.MinIdleConns
	case *redis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.MinIdleConns
	case *redis.Ring:
		o := c.Options()
		return o.ContextTimeoutEnabled, o.MinIdleConns
	}
	return true, 0
}

// RedisKey returns the Redis key that holds key's buckets under p.
func (s *Store) RedisKey(key string, p addrlimit.Policy) string { return s.redisKey(key, p) }

// redisKey returns the Redis key of key's buckets under p: prefix, p's
// name, each limit's burst and interval in ns ("/" before each), then the
// client (clientPart). The layout of a policy of one limit is that of
// earlier versions, which kept one limit per policy.
func (s *Store) redisKey(key string, p addrlimit.Policy) string {
	if len(p.Limits) == 1 {
		lim := p.Limits[0]
		return s.prefix + p.Name + "/" + strconv.Itoa(lim.Burst) + "/" + strconv.FormatInt(int64(lim.Interval), 10) + clientPart(key)
	}
	b := make([]byte, 0, len(s.prefix)+len(p.Name)+40*len(p.Limits)+4+min(len(key), 2*sha256.Size))
	b = append(b, s.prefix...)
	b = append(b, p.Name...)
	for _, lim := range p.Limits {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Burst), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Interval), 10)
	}
	return string(append(b, clientPart(key)...))
}

// clientPart is the end of a bucket's Redis key that names the client:
// ":k:" and key, or ":h:" and its SHA-256 in hex if key is longer than
// maxRawKey bytes.
func clientPart(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return ":h:" + hex.EncodeToString(sum[:])
	}
	return ":k:" + key
}

// DenyCacheLen returns the number of keys the deny cache holds.
func (s *Store) DenyCacheLen() int { return s.deny.len() }

var (
	_ store.Store         = (*Store)(nil)
	_ store.PolicyChecker = (*Store)(nil)
)
