#!/usr/bin/env bash
# Runs every benchmark of this module side by side, -count times (default 6),
# measures retained memory one process per contender, profiles addrlimit's
# allowed and denied paths, runs the end-to-end rounds (net/http on one core,
# wrk on the other, loopback only), keeps the raw figures in results/, and
# writes BENCHMARKS.md from them (benchstat and cmd/report).
# About 20 minutes on 2 cores: 12 for the benchmarks, 3 for retained memory,
# 4 for the end-to-end rounds. Run it on a quiet machine: other load shows up
# as noise in every figure.
#
#   ./run.sh            # measure everything (COUNT=6) and report
#   COUNT=10 ./run.sh
#   ./run.sh e2e        # only the end-to-end rounds, then the report
#   ./run.sh soak       # only the soak (cmd/soak: SOAK_DURATION, default 10m, per store), then the report
#   ./run.sh report     # rewrite BENCHMARKS.md from results/ without measuring
#
# The soak (20 minutes: the in-memory store, then Redis) is not part of a full
# run; run it on its own, on a quiet machine.
#
# End-to-end settings: E2E_ROUNDS (5), E2E_SECONDS (3 per contender and
# round, after a 1 s warm-up), E2E_CONNS (32 connections). It needs wrk
# (installed with apt-get when missing and run as root) and 2 or more cores.
set -euo pipefail
cd "$(dirname "$0")"
COUNT=${COUNT:-6}
E2E_ROUNDS=${E2E_ROUNDS:-5}
E2E_SECONDS=${E2E_SECONDS:-3}
E2E_CONNS=${E2E_CONNS:-32}
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
mkdir -p results
raw=results/bench.txt
tmp=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# profile NAME REGEX: a CPU profile of one benchmark, as pprof's top table.
profile() {
  go test -run '^$' -bench "$2" -benchtime 3s -cpuprofile "$tmp/$1.prof" -o "$tmp/bench.test" . >&2
  go tool pprof -top -cum -nodecount 300 "$tmp/bench.test" "$tmp/$1.prof" > "results/profile-$1.txt" 2>/dev/null
}

# e2e: the end-to-end rounds. Every round serves each contender in turn (the
# order rotates from round to round) with cmd/e2e pinned to core 0, and loads
# it with wrk pinned to core 1; results/e2e.txt gets one line per contender
# and round: round, contender, requests/s, non-2xx responses.
e2e() {
  if ! command -v wrk >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "installing wrk" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
    else
      echo "wrk is missing and cannot be installed here (need root and apt-get): no end-to-end figures" >&2
      return 0
    fi
  fi
  local pin_server=() pin_wrk=() pinned=no
  if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    pin_server=(taskset -c 0) pin_wrk=(taskset -c 1) pinned=yes
  fi
  go build -o "$tmp/e2e" ./cmd/e2e
  local libs
  mapfile -t libs < <("$tmp/e2e" -list)
  local n=${#libs[@]}
  : > results/e2e.txt
  echo "# pinned=$pinned rounds=$E2E_ROUNDS seconds=$E2E_SECONDS connections=$E2E_CONNS wrk=$(wrk -v 2>&1 | head -1 | cut -d' ' -f2)" >> results/e2e.txt
  for round in $(seq 1 "$E2E_ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
      local lib=${libs[$(((i + round - 1) % n))]}
      rm -f "$tmp/url"
      "${pin_server[@]}" "$tmp/e2e" -lib "$lib" -addr 127.0.0.1:0 > "$tmp/url" &
      server=$!
      local url=
      for _ in $(seq 100); do
        url=$(head -n 1 "$tmp/url" 2>/dev/null || true)
        [ -n "$url" ] && break
        sleep 0.05
      done
      if [ -z "$url" ]; then echo "cmd/e2e -lib $lib did not start" >&2; exit 1; fi
      "${pin_wrk[@]}" wrk -t1 -c"$E2E_CONNS" -d1s "$url" > /dev/null
      local out
      out=$("${pin_wrk[@]}" wrk -t1 -c"$E2E_CONNS" -d"${E2E_SECONDS}s" "$url")
      kill "$server"
      wait "$server" || true
      server=
      local rps non2xx
      rps=$(awk '/^Requests\/sec:/ {print $2}' <<< "$out")
      non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<< "$out")
      printf '%d\t%s\t%s\t%s\n' "$round" "$lib" "${rps:-0}" "${non2xx:-0}" | tee -a results/e2e.txt >&2
    done
  done
}

case "${1:-}" in
report) ;;
e2e) e2e ;;
soak)
  go run ./cmd/soak -duration "${SOAK_DURATION:-10m}" -md results/soak.md -samples results/soak-samples.tsv ||
    echo "the soak found the server not flat, or failed decisions: see results/soak.md" >&2
  ;;
*)
  echo "running benchmarks, -count $COUNT" >&2
  go test -run '^$' -bench . -benchmem -count "$COUNT" -timeout 90m . | tee "$raw" >&2
  echo "profiling the allowed and denied paths" >&2
  profile allowed '^BenchmarkAllowed$/^lib=addrlimit$'
  profile denied '^BenchmarkDenied$/^lib=addrlimit$'
  echo "measuring retained memory" >&2
  : > results/retained.txt
  for lib in addrlimit httprate ulule tollbooth go-limiter throttled rate-map; do
    go run ./cmd/retained -lib "$lib" -keys 1000000 >> results/retained.txt
  done
  go run ./cmd/retained -flood 10000000 -maxkeys 100000 > results/flood.txt
  echo "end to end" >&2
  e2e
  { nproc; grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'; awk '/MemTotal/ {printf "%.0f GiB\n", $2/1048576}' /proc/meminfo; go version | cut -d' ' -f3-; date -u +%Y-%m-%d; } > results/machine.txt
  ;;
esac
retained=$(cat results/retained.txt)
flood=$(cat results/flood.txt)
mapfile -t machine < results/machine.txt
COUNT=$(grep -cE '^BenchmarkAllowed/lib=addrlimit-[0-9]+[[:space:]]' "$raw")

{
  echo "# Benchmarks"
  echo
  echo "addrlimit side by side with the Go rate limiters people use today, measured in one run."
  echo "Generated by \`benchmarks/run.sh\` from the measurements of ${machine[4]} (raw figures in"
  echo "[results/](results/)); rerun it to reproduce."
  echo
  echo "- Machine: ${machine[0]} cores, ${machine[1]}, ${machine[2]} (a VM: expect ±20 % between runs; compare ratios within one run)"
  echo "- Go: ${machine[3]}"
  echo "- Command: \`cd benchmarks && COUNT=$COUNT ./run.sh\` (\`go test -run '^\$' -bench . -benchmem -count $COUNT\`)"
  echo "- Versions: $(go list -m github.com/go-chi/httprate github.com/ulule/limiter/v3 github.com/didip/tollbooth/v7 github.com/sethvargo/go-limiter github.com/throttled/throttled/v2 golang.org/x/time | tr '\n' ';' | sed 's/;$//; s/;/, /g')"
  echo
  echo "Every contender limits per client IP (RemoteAddr) with its default response headers,"
  echo "around a handler that writes 200, called through \`ServeHTTP\` with a reusable"
  echo "ResponseWriter whose header map is cleared per call. \`rate-map\` is the baseline: a"
  echo "mutex-guarded map of \`rate.Limiter\`, no headers, no memory bound. \`addrlimit-noheaders\`"
  echo "is addrlimit with \`WithHeaders(HeaderNone)\`."
  echo
  echo "Policies: the denied and 1M-keys workloads use the incident's 300/min, burst 300"
  echo "(\`TestContendersEnforceTheSamePolicy\` checks every contender allows exactly 300 of 400)."
  echo "The allowed workloads must never run out of budget, so they use 10^9 per minute with a"
  echo "burst of 300 where the library has a separate burst. \`AllowedLimits/limit=N\` has burst ="
  echo "limit = N and a token every 10 ns (every response reports a full bucket, whatever N);"
  echo "\`AllowedDraining\` drains a bucket of 10^9 refilled once a second, so that every"
  echo "response reports a new count that no pre-rendered table holds."
  echo
  go run ./cmd/report -retained results/retained.txt -e2e results/e2e.txt -profile results/profile-allowed.txt -profile-denied results/profile-denied.txt < "$raw"
  echo
  echo "## Retained heap per tracked key after 1,000,000 distinct addresses"
  echo
  echo "One process per contender (\`go run ./cmd/retained -lib NAME\`), heap after two GCs,"
  echo "300 per hour so that no bucket refills during the run."
  echo
  echo "| library | addresses | keys tracked | bytes per key |"
  echo "|---|---:|---:|---:|"
  printf '%s' "$retained" | awk -F'\t' 'NF==4 {printf "| %s | %d | %d | %.1f |\n", $1, $2, $3, $4}'
  echo
  echo "throttled's memstore is an LRU of 65,536 keys, so it tracks only that many."
  echo
  echo "## A flood of 10,000,000 distinct addresses with WithMaxKeys(100000)"
  echo
  echo "\`go run ./cmd/retained -flood 10000000 -maxkeys 100000\`: heap above the starting point,"
  echo "sampled after every million addresses."
  echo
  printf '%s\n' "$flood" | awk -F'\t' '{printf "- addresses: %d, cap: %d, keys held at the end: %d, evictions: %d, peak heap growth: %s MB\n- samples: %s\n", $2, $3, $4, $5, $6, $7}'
  echo
  if [ -f results/soak.md ]; then
    cat results/soak.md
    echo
  fi
  echo "## benchstat"
  echo
  echo '```'
  go run "$BENCHSTAT" -col /lib "$raw"
  echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
