package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Operations of the script, one per Store method.
const (
	opTake   = 0
	opRefund = 1
	opPeek   = 2
	opReset  = 3
)

// argsPerKey is how many ARGV entries the script reads per key: operation,
// n, refill interval in whole microseconds, burst.
const argsPerKey = 4

// gcraBody is the GCRA script after its clock: it runs GCRA on every key
// of KEYS in order and returns four integers per key: allowed (1/0),
// remaining whole tokens, retry after µs, reset after µs. A key that fails
// (a foreign value of another type, say) gets -1 as allowed instead, and its
// error text follows the 4 × #KEYS integers, in key order: one key's error
// never fails the others of its call. A bucket is one integer, its
// theoretical arrival time (TAT) in µs, written with SET … PX so that the key
// expires when the bucket is full again; a full bucket has no key. Denied
// Takes and Peeks write nothing. Operation 4 + d is a Take that first
// charges a debt of d tokens (see TakeWithDebt), which may leave the bucket
// up to one burst below empty (TAT up to now + 2 tau; Remaining 0); the debt
// is written even when the Take is denied. Lua numbers are doubles: New's
// bounds keep every TAT and tau below 2^53 µs, so the arithmetic is exact.
//
// The clock that precedes it sets now (µs) and slack (ms added to every
// expiry). The store's clock is Redis TIME (redisTime); tests build their own
// script with another clock (export_test.go).
const gcraBody = `
local function decide(op, n, interval, tau, key)
  local tat = now
  local allowed = -1
  if op == 3 then
    redis.call("DEL", key)
  else
    local v = tonumber(redis.call("GET", key))
    if v and v > now then tat = v end
    local paid = op >= 4
    if paid then
      tat = math.min(tat + (op - 4) * interval, now + 2 * tau)
      op = 0
    end
    if op == 0 then
      local nxt = tat + n * interval
      if nxt - now > tau then
        allowed = 0
      else
        tat = nxt
        allowed = 1
      end
    elseif op == 1 then
      tat = math.max(tat - n * interval, now)
    end
    if allowed == 1 or op == 1 or paid then
      if tat > now then
        redis.call("SET", key, string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000) + slack)
      else
        redis.call("DEL", key)
      end
    end
    if allowed == 0 then
      return 0, math.max(math.floor((now + tau - tat) / interval), 0), tat + n * interval - tau - now, tat - now
    end
  end
  local rem = math.max(math.floor((now + tau - tat) / interval), 0)
  local retry = 0
  if rem < 1 then
    retry = tat + interval - tau - now
  end
  if allowed == -1 then
    allowed = rem >= 1 and 1 or 0
  end
  return allowed, rem, retry, tat - now
end
local out, errs = {}, {}
for i = 1, #KEYS do
  local a = (i - 1) * 4
  local interval = tonumber(ARGV[a + 3])
  local ok, allowed, rem, retry, reset = pcall(decide, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    interval, interval * tonumber(ARGV[a + 4]), KEYS[i])
  if not ok then
    errs[#errs + 1] = type(allowed) == "table" and allowed.err or tostring(allowed)
    allowed, rem, retry, reset = -1, 0, 0, 0
  end
  out[#out + 1] = allowed
  out[#out + 1] = rem
  out[#out + 1] = retry
  out[#out + 1] = reset
end
for _, e in ipairs(errs) do
  out[#out + 1] = e
end
return out
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

// A keyError is Redis's error for one key of a script call (WRONGTYPE, say):
// an answer about that key, not an outage.
type keyError string

func (e keyError) Error() string { return string(e) }

// RedisError marks keyError as an error Redis replied (redis.Error).
func (keyError) RedisError() {}

// isNoScript reports whether err is Redis saying it does not know the
// script's SHA (after a restart or SCRIPT FLUSH).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// run makes one script call over calls (one key, or several on one Redis)
// and stores each call's answer or the error in it.
func (sc *script) run(ctx context.Context, c redis.Scripter, calls []*call) {
	keys, args := sc.args(calls)
	v, err := sc.Run(ctx, c, keys, args...).Slice()
	setResults(calls, v, err)
}

func (sc *script) args(calls []*call) ([]string, []any) {
	keys := make([]string, len(calls))
	args := make([]any, 0, argsPerKey*len(calls)+1) // + a test clock
	for i, c := range calls {
		keys[i] = c.key
		args = append(args, c.op, c.n, c.interval, c.burst)
	}
	if sc.clock != nil {
		args = append(args, sc.clock().UnixMicro())
	}
	return keys, args
}

// setResults spreads a script's reply (or err) over the calls it answered:
// argsPerKey integers per call, then the error text of each failed key.
func setResults(calls []*call, v []any, err error) {
	if err == nil && len(v) < argsPerKey*len(calls) {
		err = fmt.Errorf("script returned %d values, want at least %d", len(v), argsPerKey*len(calls))
	}
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	errs := v[argsPerKey*len(calls):]
	for i, c := range calls {
		for j := range c.reply {
			x, ok := v[argsPerKey*i+j].(int64)
			if !ok {
				c.err = fmt.Errorf("script returned %T, want an integer", v[argsPerKey*i+j])
				break
			}
			c.reply[j] = x
		}
		if c.err == nil && c.reply[0] == -1 {
			c.err = errors.New("script returned no error text for a failed key")
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
// sends each to the node that owns its key), retrying with EVAL the calls
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
