package redisstore

import (
	"context"
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

// gcra is the one script. It runs GCRA on every key of KEYS in order, with
// Redis TIME as the only clock, and returns four integers per key: allowed
// (1/0), remaining whole tokens, retry after µs, reset after µs. A bucket is
// one integer, its theoretical arrival time (TAT) in µs, written with SET … PX
// so that the key expires when the bucket is full again; a full bucket has no
// key. Denied Takes and Peeks write nothing. Operation 4 + d is a Take that
// first charges a debt of d tokens (see TakeWithDebt), which may leave the
// bucket up to one burst below empty (TAT up to now + 2 tau; Remaining 0).
//
// One call usually carries one key; the batcher sends several keys of one
// Redis Cluster hash slot in one call. Tests only may pass the time as a
// last ARGV (their store has a clock: see export_test.go); keys then live an
// hour longer, since Redis expires them on its own clock. Lua numbers are doubles: New's bounds
// keep every TAT and tau below 2^53 µs, so the arithmetic is exact.
var gcra = redis.NewScript(`
local now, slack = 0, 0
if #ARGV > #KEYS * 4 then
  now, slack = tonumber(ARGV[#ARGV]), 3600000
else
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local out = {}
for i = 1, #KEYS do
  local a = (i - 1) * 4
  local op = tonumber(ARGV[a + 1])
  local n = tonumber(ARGV[a + 2])
  local interval = tonumber(ARGV[a + 3])
  local tau = interval * tonumber(ARGV[a + 4])
  local key = KEYS[i]
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
        out[#out + 1] = 0
        out[#out + 1] = math.max(math.floor((now + tau - tat) / interval), 0)
        out[#out + 1] = nxt - tau - now
        out[#out + 1] = tat - now
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
  end
  if allowed ~= 0 then
    local rem = math.max(math.floor((now + tau - tat) / interval), 0)
    local retry = 0
    if rem < 1 then
      retry = tat + interval - tau - now
    end
    if allowed == -1 then
      allowed = rem >= 1 and 1 or 0
    end
    out[#out + 1] = allowed
    out[#out + 1] = rem
    out[#out + 1] = retry
    out[#out + 1] = tat - now
  end
end
return out
`)

// isNoScript reports whether err is Redis saying it does not know the
// script's SHA (after a restart or SCRIPT FLUSH).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// runScript runs one script call over calls (which share one hash slot) and
// stores each call's answer or the error in it. clock is nil outside tests.
func runScript(ctx context.Context, c redis.Scripter, calls []*call, clock func() time.Time) {
	keys, args := scriptArgs(calls, clock)
	v, err := gcra.Run(ctx, c, keys, args...).Int64Slice()
	setResults(calls, v, err)
}

func scriptArgs(calls []*call, clock func() time.Time) ([]string, []any) {
	keys := make([]string, len(calls))
	args := make([]any, 0, argsPerKey*len(calls)+1)
	for i, c := range calls {
		keys[i] = c.key
		args = append(args, c.op, c.n, c.interval, c.burst)
	}
	if clock != nil {
		args = append(args, clock().UnixMicro())
	}
	return keys, args
}

// setResults spreads a script's reply (or err) over the calls it answered.
func setResults(calls []*call, v []int64, err error) {
	if err == nil && len(v) != argsPerKey*len(calls) {
		err = fmt.Errorf("script returned %d values, want %d", len(v), argsPerKey*len(calls))
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		copy(c.reply[:], v[argsPerKey*i:])
	}
}

// runPipelined runs one script call per group in one pipeline (go-redis
// sends each to the node that owns its slot), retrying with EVAL the groups
// that Redis answered NOSCRIPT.
func runPipelined(ctx context.Context, c redis.UniversalClient, groups [][]*call, clock func() time.Time) {
	cmds := make([]*redis.Cmd, len(groups))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			keys, args := scriptArgs(g, clock)
			cmds[i] = gcra.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	for i, g := range groups {
		if isNoScript(cmds[i].Err()) {
			runScript(ctx, c, g, clock)
			continue
		}
		v, err := cmds[i].Int64Slice()
		setResults(g, v, err)
	}
}
