package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// Lease time: the default, and the bounds WithLeaseTime accepts.
const (
	// DefaultLeaseTime is how long a slot stays held without renewal
	// unless WithLeaseTime says otherwise. The Limiter renews every third
	// of it, so two renewals in a row may fail (a Sentinel or Cluster
	// failover takes 2–4 s) before a running request's lease lapses, and
	// an instance that dies gives its slots back within 10 s.
	DefaultLeaseTime = 10 * time.Second
	// minLeaseTime and maxLeaseTime bound WithLeaseTime. Below 100 ms a
	// renewal every third of it leaves a loaded instance too little room
	// to renew in time; above an hour a dead instance holds its slots
	// longer than any client waits for them.
	minLeaseTime = 100 * time.Millisecond
	maxLeaseTime = time.Hour
	// maxLeaseID bounds the length of a lease ID, a member of a Redis
	// sorted set; the Limiter's are far shorter.
	maxLeaseID = 200
	// renewChunk bounds the leases one script call renews on a single
	// Redis, so that one call never blocks Redis for long; the chunks of
	// one Renew share a pipeline, one round trip.
	renewChunk = 256
)

// WithLeaseTime sets how long an in-flight slot stays held without renewal
// (default DefaultLeaseTime, 10 s): an instance that dies gives its slots
// back within it, and a running request whose renewals all fail for about
// two thirds of it loses its slot (another request may then take it). It
// must be between 100 ms and 1 h, and is counted in whole microseconds of
// Redis TIME. Keep it well above WithTimeout: the Limiter
// renews every third of it.
func WithLeaseTime(d time.Duration) Option {
	return func(s *Store) error {
		if d < minLeaseTime || d > maxLeaseTime {
			return fmt.Errorf("redisstore: lease time must be between %v and %v, got %v", minLeaseTime, maxLeaseTime, d)
		}
		s.lease = d.Truncate(time.Microsecond)
		return nil
	}
}

// Operations of the in-flight script.
const (
	opAcquire = 0
	opRenew   = 1
)

// inflightBody is the in-flight script after its clock (see gcraBody): the
// slots of a key under a policy are one sorted set, whose members are the
// lease IDs that hold a slot, each scored with its expiry in µs of the
// script's clock. Every write sets the set's own expiry to the lease time
// (plus the clock's slack), so that a set nobody renews vanishes with its
// last lease.
//
// ARGV: the operation, the lease time in µs, the set's expiry in ms (see
// inflightArgs), then for an acquire the lease ID and the limit, for a renewal each
// lease's ID, in the order of KEYS.
//
// Acquire (one key) drops the expired members, then adds the ID with a
// new expiry if fewer than limit are held (an ID already held is renewed
// and counted once); it returns how many are held and 1, or how many
// refused it and 0. Renew gives each ID still held (expiry after now) a
// new expiry and takes back none that lapsed; a key that fails (a value of
// another type) fails alone: the reply is the number renewed, then the
// error text of each key that failed. Scores are written with %.0f: µs
// since 1970 are below 2^53, exact in a double.
const inflightBody = `
local op, lease, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) + slack
local expiry = string.format("%.0f", now + lease)
if op == 0 then
  local key, id = KEYS[1], ARGV[4]
  redis.call("ZREMRANGEBYSCORE", key, "-inf", string.format("%.0f", now))
  local held = redis.call("ZCARD", key)
  if not redis.call("ZSCORE", key, id) then
    if held >= tonumber(ARGV[5]) then
      return {held, 0}
    end
    held = held + 1
  end
  redis.call("ZADD", key, expiry, id)
  redis.call("PEXPIRE", key, ttl)
  return {held, 1}
end
local function renew(key, id)
  local score = redis.call("ZSCORE", key, id)
  if score and tonumber(score) > now then
    redis.call("ZADD", key, "XX", expiry, id)
    redis.call("PEXPIRE", key, ttl)
    return 1
  end
  return 0
end
local res = {0}
for i = 1, #KEYS do
  local ok, n = pcall(renew, KEYS[i], ARGV[3 + i])
  if ok then
    res[1] = res[1] + n
  else
    res[#res + 1] = type(n) == "table" and n.err or tostring(n)
  end
end
return res
`

// inflight is the store's in-flight script, on Redis TIME.
var inflight = &script{Script: redis.NewScript(redisTime + inflightBody)}

// LeaseTime implements store.InFlightStore: the lease time set by
// WithLeaseTime.
func (s *Store) LeaseTime() time.Duration { return s.lease }

// Acquire implements store.InFlightStore in one script call (its own
// round trip, not batched with other calls). A lease needs an ID of 1 to
// 200 bytes and a policy name that a Policy would accept (or none), and
// limit must be at least 1. It drops the lapsed leases of
// (l.Policy, l.Key), then takes a slot for l.ID, with an expiry of
// LeaseTime in Redis TIME, if fewer than limit are held. An ID that
// already holds a slot (an Acquire retried after an error) keeps it,
// renewed, and is counted once. No deny cache applies: a slot may be given
// back at any moment by any instance. Errors start with "redisstore: "; the
// timeout and the circuit breaker apply as for Take, and a slot taken by a
// call whose answer was lost lapses with its lease.
func (s *Store) Acquire(ctx context.Context, l store.Lease, limit int) (held int, ok bool, err error) {
	if limit < 1 {
		return 0, false, fmt.Errorf("redisstore: in-flight limit must be at least 1, got %d", limit)
	}
	key, err := s.leaseKey(l)
	if err != nil {
		return 0, false, err
	}
	var v []any
	err = s.oneRoundTrip(ctx, key, func(ctx context.Context) error {
		var err error
		v, err = s.inflight.eval(ctx, s.client, []string{key}, s.inflightArgs(opAcquire, 2, l.ID, limit))
		return err
	})
	if err != nil {
		return 0, false, err
	}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("redisstore: in-flight script returned %d values, want 2", len(v))
	}
	n, okN := v[0].(int64)
	a, okA := v[1].(int64)
	if !okN || !okA {
		return 0, false, fmt.Errorf("redisstore: in-flight script returned %T and %T, want integers", v[0], v[1])
	}
	return int(n), a == 1, nil
}

// Release implements store.InFlightStore in one round trip (ZREM of
// l.ID, which removes that member only, once: releasing twice, or a lease
// that lapsed and whose slot another ID took since, frees nothing else).
// An error (Redis unreachable, the timeout, an open circuit; it starts
// with "redisstore: ") leaves the lease held until it lapses, at most
// LeaseTime after its last renewal: a Release that fails is not retried by
// the store, and never leaks a slot for longer than that.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	key, err := s.leaseKey(l)
	if err != nil {
		return err
	}
	return s.oneRoundTrip(ctx, key, func(ctx context.Context) error {
		return s.client.ZRem(ctx, key, l.ID).Err()
	})
}

// Renew implements store.InFlightStore in one round trip for all of ls:
// on a single Redis, one script call per 256 leases, in one pipeline;
// otherwise (Cluster, Ring) one script call per lease, in one pipeline,
// which go-redis sends to each key's node, so no call spans two slots. A
// lease still held gets an expiry of LeaseTime from now, in Redis TIME; one
// that lapsed is not taken again. Invalid leases (see Acquire) and leases
// on a node whose circuit is open are not sent. The error (starting with "redisstore: ") says how many
// leases may not have been renewed and the first reason; the others were.
func (s *Store) Renew(ctx context.Context, ls []store.Lease) error {
	if len(ls) == 0 {
		return nil
	}
	failed, first := 0, error(nil)
	fail := func(n int, err error) {
		failed += n
		if first == nil {
			first = err
		}
	}
	// An invalid lease fails alone; the valid ones are renewed.
	valid, keys := make([]store.Lease, 0, len(ls)), make([]string, 0, len(ls))
	for _, l := range ls {
		k, err := s.leaseKey(l)
		if err != nil {
			fail(1, err)
			continue
		}
		valid, keys = append(valid, l), append(keys, k)
	}
	chunk := 1
	if _, single := s.client.(*redis.Client); single {
		chunk = renewChunk
	}
	// A part is one script call: leases valid[from:to], all on node br.
	type part struct {
		from, to int
		br       *breaker
		args     []any
		reply    []any
		err      error
	}
	var parts []*part
	var nodes []*breaker
	for from := 0; from < len(valid); from += chunk {
		p := &part{from: from, to: min(from+chunk, len(valid)), br: s.breakerFor(ctx, keys[from])}
		if err := p.br.check(); err != nil {
			fail(p.to-p.from, err)
			continue
		}
		p.args = s.inflightArgs(opRenew, p.to-p.from)
		for _, l := range valid[p.from:p.to] {
			p.args = append(p.args, l.ID)
		}
		p.args = s.inflight.withClock(p.args)
		parts = append(parts, p)
		if !slices.Contains(nodes, p.br) {
			nodes = append(nodes, p.br)
		}
	}
	if len(parts) == 0 { // every lease invalid, or on a node whose circuit is open
		return fmt.Errorf("redisstore: renewing %d of %d leases: %w", failed, len(ls), first)
	}
	s.roundTripTo(ctx, nodes, len(parts) > 1, func(ctx context.Context) {
		if len(parts) == 1 {
			p := parts[0]
			p.reply, p.err = s.inflight.Run(ctx, s.client, keys[p.from:p.to], p.args...).Slice()
			return
		}
		cmds := make([]*redis.Cmd, len(parts))
		_, _ = s.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i, p := range parts {
				cmds[i] = s.inflight.EvalSha(ctx, pl, keys[p.from:p.to], p.args...)
			}
			return nil
		})
		for i, p := range parts {
			if isNoScript(cmds[i].Err()) { // Redis restarted or flushed its scripts
				p.reply, p.err = s.inflight.Run(ctx, s.client, keys[p.from:p.to], p.args...).Slice()
				continue
			}
			p.reply, p.err = cmds[i].Slice()
		}
	}, func(br *breaker) error {
		for _, p := range parts {
			if p.br == br && p.err != nil && isOutage(p.err) {
				return p.err
			}
		}
		return nil
	})
	for _, p := range parts {
		switch {
		case p.err != nil:
			fail(p.to-p.from, p.err)
		case len(p.reply) > 1: // each failed key's error text after the count
			msg, _ := p.reply[1].(string)
			fail(len(p.reply)-1, keyError(msg))
		}
	}
	if first != nil {
		return fmt.Errorf("redisstore: renewing %d of %d leases: %w", failed, len(ls), first)
	}
	return nil
}

// inflightArgs returns the ARGV of an in-flight script call (see
// inflightBody) with room for more entries: its operation, the lease time,
// then more.
func (s *Store) inflightArgs(op, more int, args ...any) []any {
	// The set's own expiry: the lease time in whole ms, rounded up, and one
	// ms more, since Redis expires keys on its ms clock, which may lag the
	// µs TIME the script read: a set never vanishes before its last lease.
	ms := (s.lease+time.Millisecond-1)/time.Millisecond + 1
	a := make([]any, 0, 3+more+1) // and a test clock
	a = append(a, op, int64(s.lease/time.Microsecond), int64(ms))
	return append(a, args...)
}

// oneRoundTrip makes one round trip f to the node that holds key, bounded
// and recorded as a decision's (see roundTrip), unless that node's circuit
// is open; the error starts with "redisstore: ".
func (s *Store) oneRoundTrip(ctx context.Context, key string, f func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	br := s.breakerFor(ctx, key)
	if err := br.check(); err != nil {
		return err
	}
	var err error
	s.roundTripTo(ctx, []*breaker{br}, false, func(ctx context.Context) { err = f(ctx) }, func(*breaker) error {
		if err != nil && isOutage(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

// roundTripTo makes one round trip f to nodes, bounded as roundTrip bounds
// a decision's, then records on each node's breaker the outage that
// outage reports for it (nil for none).
func (s *Store) roundTripTo(ctx context.Context, nodes []*breaker, pipelined bool, f func(ctx context.Context), outage func(*breaker) error) {
	timeout, extended := s.startRoundTrip(nodes, pipelined)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	f(rctx)
	cancel()
	endRoundTrip(nodes)
	for _, br := range nodes {
		err := outage(br)
		if err != nil && extended && ctx.Err() == nil {
			br.unreachable.Store(true)
		}
		br.record(ctx, err)
	}
}

// leaseKey returns the Redis key of l's slots, or an error naming what
// makes l invalid.
func (s *Store) leaseKey(l store.Lease) (string, error) {
	if l.ID == "" || len(l.ID) > maxLeaseID {
		return "", fmt.Errorf("redisstore: lease ID must be 1 to %d bytes, got %d", maxLeaseID, len(l.ID))
	}
	if l.Policy != "" {
		// The Limiter's rule for a policy name, so that names hold no "/".
		if err := (addrlimit.Policy{Name: l.Policy, Limits: nameCheck[:]}).Validate(); err != nil {
			return "", fmt.Errorf("redisstore: %w", err)
		}
	}
	return s.prefix + l.Policy + "/inflight" + clientPart(l.Key), nil
}

// nameCheck is a valid limit, so that Policy.Validate checks a name alone.
var nameCheck = [1]addrlimit.Limit{{Burst: 1, Interval: time.Second}}

var _ store.InFlightStore = (*Store)(nil)
