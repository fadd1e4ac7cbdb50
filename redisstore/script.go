package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit/store"
	"github.com/redis/go-redis/v9"
)

// Operations of the script, one per Store method.
const (
	opTake   = 0
	opRefund = 1
	opPeek   = 2
	opReset  = 3
)

// A script call's ARGV: three entries per decision (operation, n, and the
// index in ARGV of its policy), then each distinct policy of the call once:
// the number of limits k, then each limit's refill interval in whole
// microseconds and burst. A decision's KEYS entry is the one key of its
// buckets; its reply is allowed, then each limit's time until full in µs.
// Policies are sent once per call, so that the script's cost per decision
// hardly depends on the number of limits.
const argsPerCall = 3

// gcraBody is the GCRA script after its clock. Its KEYS and ARGV hold one
// or more decisions (a batch), one key each, and it returns, per decision,
// allowed (1/0) and each limit's time until full (µs, 0 for a full
// bucket). A decision that fails (a foreign value of another type at its
// key, say, or a write refused with OOM) gets -1 as allowed instead, and its
// error text follows every decision's integers, in decision order: one
// decision's error never fails the others of its call.
//
// The buckets of a key under a policy are one Redis key, whose value is
// each limit's theoretical arrival time (TAT) in µs: for one limit, the
// integer in decimal (as in earlier versions); for several, each as a
// little-endian float64 (exact below 2^53), in the policy's order (struct.pack
// "<dd…", decoded by one C call). It is written with SET … PX, so that the
// key expires when every bucket is full again; full buckets have no key. A
// value the script cannot read (a string of another length, say) reads as
// full buckets. A decision reads every limit's TAT at
// the one instant now, then decides for all of them: a Take of n is allowed
// only if every limit can pay n, and then charged to each; denied, it
// writes nothing. A Refund gives n back to each limit, Peek writes nothing,
// Reset deletes the key. Operation 4 + d is a Take that first charges a debt
// of d tokens to every limit (see TakeWithDebt), which may leave a bucket up
// to one burst below empty (TAT up to now + 2 tau); the debt is written even
// when the Take is denied. A decision makes one write at most, so a failed
// one writes nothing. Lua numbers are doubles: New's bounds keep every TAT
// and tau below 2^53 µs, so the arithmetic is exact.
//
// The clock that precedes it sets now (µs) and slack (ms added to every
// expiry). The store's clock is Redis TIME (redisTime); tests build their own
// script with another clock (export_test.go).
const gcraBody = `
local packed = {"<d", "<dd", "<ddd", "<dddd"}
local function decide(op, n, key, k, ivs, taus)
  local tats = {}
  if op == 3 then
    redis.call("DEL", key)
    return 1, nil
  end
  local v = redis.call("GET", key)
  if not v then
  elseif k == 1 then
    tats[1] = tonumber(v)
  elseif #v == 8 * k then
    tats = {struct.unpack(packed[k], v)}
  end
  for i = 1, k do
    local t = tats[i]
    tats[i] = (t and t > now) and t or now
  end
  local paid = op >= 4
  if paid then
    for i = 1, k do
      tats[i] = math.min(tats[i] + (op - 4) * ivs[i], now + 2 * taus[i])
    end
    op = 0
  end
  local allowed = 1
  if op == 0 then
    for i = 1, k do
      if tats[i] + n * ivs[i] - now > taus[i] then
        allowed = 0
      end
    end
    if allowed == 1 then
      for i = 1, k do
        tats[i] = tats[i] + n * ivs[i]
      end
    end
  elseif op == 1 then
    for i = 1, k do
      tats[i] = math.max(tats[i] - n * ivs[i], now)
    end
  end
  if (op == 0 and allowed == 1) or op == 1 or paid then
    local last = now
    for i = 1, k do
      if tats[i] > last then last = tats[i] end
    end
    if last == now then
      redis.call("DEL", key)
    elseif k == 1 then
      redis.call("SET", key, string.format("%.0f", last), "PX", math.ceil((last - now) / 1000) + slack)
    else
      redis.call("SET", key, struct.pack(packed[k], unpack(tats, 1, k)), "PX", math.ceil((last - now) / 1000) + slack)
    end
  end
  return allowed, tats
end
local res, errs, pols = {}, {}, {}
for d = 1, #KEYS do
  local a = 3 * d - 2
  local op, n, at = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local pol = pols[at]
  if not pol then
    pol = {k = tonumber(ARGV[at]), ivs = {}, taus = {}}
    for i = 1, pol.k do
      local iv = tonumber(ARGV[at + 2 * i - 1])
      pol.ivs[i] = iv
      pol.taus[i] = iv * tonumber(ARGV[at + 2 * i])
    end
    pols[at] = pol
  end
  local k = pol.k
  local ok, allowed, tats = pcall(decide, op, n, KEYS[d], k, pol.ivs, pol.taus)
  if not ok then
    errs[#errs + 1] = type(allowed) == "table" and allowed.err or tostring(allowed)
    allowed, tats = -1, nil
  end
  res[#res + 1] = allowed
  for i = 1, k do
    res[#res + 1] = tats and tats[i] - now or 0
  end
end
for _, e in ipairs(errs) do
  res[#res + 1] = e
end
return res
`

// redisTime makes Redis TIME the script's only clock.
const redisTime = `local t = redis.call("TIME")
local now, slack = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0`

// gcra is the store's script.
var gcra = &script{Script: redis.NewScript(redisTime + gcraBody)}

// A script is gcraBody after a clock. clock is nil when the script reads
// Redis TIME; otherwise the script takes the time as a last ARGV (tests).
type script struct {
	*redis.Script
	clock func() time.Time
}

// A keyError is Redis's error for one decision of a script call
// (WRONGTYPE at one of its keys, say): an answer about those keys, not an
// outage (unless it is one, as OOM is: see isOutage).
type keyError string

func (e keyError) Error() string { return string(e) }

// RedisError marks keyError as an error Redis replied (redis.Error).
func (keyError) RedisError() {}

// isNoScript reports whether err is Redis saying it does not know the
// script's SHA (after a restart or SCRIPT FLUSH).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// run makes one script call over calls (one decision, or several on one
// Redis) and stores each call's answer or the error in it.
func (sc *script) run(ctx context.Context, c redis.Scripter, calls []*call) {
	keys, args := sc.args(calls)
	v, err := sc.Run(ctx, c, keys, args...).Slice()
	setResults(calls, v, err)
}

func (sc *script) args(calls []*call) ([]string, []any) {
	keys := make([]string, len(calls))
	args := make([]any, argsPerCall*len(calls), argsPerCall*len(calls)+1+2*store.MaxLimits+1) // one policy, a test clock
	type policy struct {
		c  *call
		at any // 1-based index in ARGV, boxed once
	}
	var seen []policy
	for j, c := range calls {
		keys[j] = c.key
		var at any
		for _, p := range seen {
			if p.c.limits == c.limits && p.c.interval == c.interval && p.c.burst == c.burst {
				at = p.at
				break
			}
		}
		if at == nil {
			at = len(args) + 1
			args = append(args, c.limits)
			for i := range c.limits {
				args = append(args, c.interval[i], c.burst[i])
			}
			seen = append(seen, policy{c, at})
		}
		args[argsPerCall*j], args[argsPerCall*j+1], args[argsPerCall*j+2] = c.op, c.n, at
	}
	return keys, sc.withClock(args)
}

// withClock returns args, then the time if sc takes it from ARGV (tests).
func (sc *script) withClock(args []any) []any {
	if sc.clock != nil {
		args = append(args, sc.clock().UnixMicro())
	}
	return args
}

// eval runs sc with keys and args (and the time, see withClock).
func (sc *script) eval(ctx context.Context, c redis.Scripter, keys []string, args []any) ([]any, error) {
	return sc.Run(ctx, c, keys, sc.withClock(args)...).Slice()
}

// setResults spreads a script's reply (or err) over the calls it answered:
// 1 + limits integers per call, then the error text of each failed call.
func setResults(calls []*call, v []any, err error) {
	want := 0
	for _, c := range calls {
		want += 1 + c.limits
	}
	if err == nil && len(v) < want {
		err = fmt.Errorf("script returned %d values, want at least %d", len(v), want)
	}
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	errs := v[want:]
	for _, c := range calls {
		for j := range 1 + c.limits {
			x, ok := v[j].(int64)
			if !ok {
				c.err = fmt.Errorf("script returned %T, want an integer", v[j])
				break
			}
			c.reply[j] = x
		}
		v = v[1+c.limits:]
		if c.err == nil && c.reply[0] == -1 {
			c.err = errors.New("script returned no error text for a failed decision")
			if len(errs) > 0 {
				if msg, ok := errs[0].(string); ok {
					c.err = keyError(msg)
				}
				errs = errs[1:]
			}
		}
	}
}

// runPipelined makes one script call per call in one pipeline (go-redis
// sends each to the node that owns its keys' slot), retrying with EVAL the calls
// that Redis answered NOSCRIPT.
func (sc *script) runPipelined(ctx context.Context, c redis.UniversalClient, calls []*call) {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range calls {
			keys, args := sc.args(calls[i : i+1])
			cmds[i] = sc.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	for i := range calls {
		one := calls[i : i+1]
		if isNoScript(cmds[i].Err()) {
			sc.run(ctx, c, one)
			continue
		}
		v, err := cmds[i].Slice()
		setResults(one, v, err)
	}
}
