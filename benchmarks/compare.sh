#!/usr/bin/env bash
# Compares this checkout with an earlier revision BASE on one harness: the
# root package's bench_test.go as it was at BASE (the file the guard rails of
# a change are stated against; HARNESS=REV takes it from another revision)
# is compiled into both trees, the two test
# binaries run interleaved COUNT times (default 8), and benchstat prints the
# comparison. Then, unless ONLY_ROOT=1, redisstore's BenchmarkTake
# (decisions/s against a loopback redis-server, one per binary) and the
# end-to-end rounds of cmd/e2e (wrk, as run.sh does) for the addrlimit
# contenders, each built from both trees, interleaved the same way.
#
#   ./compare.sh e0355c9                # everything, COUNT=8
#   COUNT=10 ONLY_ROOT=1 ./compare.sh v0.1.0
#   HARNESS=e0355c9 BENCH='^BenchmarkDenied$' ONLY_ROOT=1 ./compare.sh HEAD~3
#
# Raw figures go to results/compare-*.txt. Run it on a quiet machine; it
# needs redis-server and wrk on PATH for the second part, and about 25 min.
set -euo pipefail
cd "$(dirname "$0")"
. ./e2e.sh
base=${1:?usage: compare.sh BASE}
harness=${HARNESS:-$base}
COUNT=${COUNT:-8}
E2E_SECONDS=${E2E_SECONDS:-3}
E2E_CONNS=${E2E_CONNS:-32}
BENCH=${BENCH:-'^Benchmark(Allowed|AllowedDraining|Allowed10k|Denied|Exempt)$'}
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
repo=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  git -C "$repo" worktree remove --force "$tmp/base" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach -q "$tmp/base" "$base"
mkdir -p results "$tmp/new"
# The new tree: this checkout as it is, with BASE's root benchmarks.
(cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tmp/new")
git -C "$repo" show "$harness:bench_test.go" > "$tmp/new/bench_test.go"
git -C "$repo" show "$harness:bench_test.go" > "$tmp/base/bench_test.go"
# Each tree is built LAYOUTS times (default 3), each time with a padding file
# of a different size compiled into the package first, so that its code sits
# at other addresses: the same code measures up to ±8 % apart from one
# layout to another here, a bias that more runs of one binary do not
# average out. The runs use the layouts in turn and benchstat pools them.
LAYOUTS=${LAYOUTS:-3}
pad() { # pad K: a padding file of K×64 statements
  printf 'package addrlimit\n\nimport "os"\n\nvar layoutPadSink = layoutPad(len(os.Args))\n\nfunc layoutPad(n int) int {\n\ts := 0\n'
  for i in $(seq 1 $((64 * $1))); do printf '\tif n == %d {\n\t\ts += %d * n\n\t}\n' $((100000 + i)) "$i"; done
  printf '\treturn s\n}\n'
}
for tree in base new; do
  for k in $(seq 0 $((LAYOUTS - 1))); do
    pad "$k" > "$tmp/$tree/aaa_layout_pad_test.go"
    (cd "$tmp/$tree" && GOWORK=off go test -c -o "$tmp/root-$tree-$k.test" .)
  done
  rm "$tmp/$tree/aaa_layout_pad_test.go"
done

# interleave OUT CMD...: runs CMD for base and new (BIN replaced by each
# binary's prefix) COUNT times, alternating, into results/compare-OUT-*.txt.
interleave() {
  local out=$1
  shift
  : > "results/compare-$out-base.txt"
  : > "results/compare-$out-new.txt"
  for i in $(seq 1 "$COUNT"); do
    for tree in base new; do
      "$@" "$tree" >> "results/compare-$out-$tree.txt"
    done
  done
  go run "$BENCHSTAT" "base=results/compare-$out-base.txt" "new=results/compare-$out-new.txt" | tee "results/compare-$out.txt"
}

root_run=0
root_bench() {
  "$tmp/root-$1-$((root_run / 2 % LAYOUTS)).test" -test.run '^$' -test.bench "$BENCH" -test.benchmem -test.count 1
  root_run=$((root_run + 1))
}
interleave root root_bench
[ "${ONLY_ROOT:-0}" = 1 ] && exit 0

for tree in base new; do
  (cd "$tmp/$tree/redisstore" && GOWORK=off go test -c -o "$tmp/redis-$tree.test" .)
  (cd "$tmp/$tree/benchmarks" && GOWORK=off go build -o "$tmp/e2e-$tree" ./cmd/e2e)
done
redis_bench() { (cd "$tmp/$1/redisstore" && "$tmp/redis-$1.test" -test.run '^$' -test.bench '^BenchmarkTake$' -test.benchmem -test.count 1); }
interleave redis redis_bench

e2e_pins
# e2e_bench TREE: one round of every addrlimit contender, as benchmark lines
# (requests/s as ns per request) so that benchstat compares them.
e2e_bench() {
  for lib in addrlimit addrlimit-noheaders; do
    e2e_round "$tmp/e2e-$1" "$lib" >&2
    awk -v lib="$lib" -v rps="$e2e_rps" 'BEGIN { printf "BenchmarkE2E/lib=%s 1 %.1f ns/op %.0f req/s\n", lib, 1e9 / rps, rps }'
  done
}
interleave e2e e2e_bench
