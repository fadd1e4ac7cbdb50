package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// floodResults holds the custom metrics of the BenchmarkFlood* workloads
// (benchmarks/flood_test.go): workload -> metric unit -> samples.
type floodResults struct {
	data      map[string]map[string][]float64
	workloads []string
}

// parseFlood reads the BenchmarkFlood lines of go test -bench output.
func parseFlood(in io.Reader) *floodResults {
	res := &floodResults{data: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		name, f, ok := benchLine(sc.Text())
		if !ok || !strings.HasPrefix(name, "Flood") {
			continue
		}
		if res.data[name] == nil {
			res.data[name] = map[string][]float64{}
			res.workloads = append(res.workloads, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				res.data[name][f[i+1]] = append(res.data[name][f[i+1]], v)
			}
		}
	}
	return res
}

// metric returns the median of unit in work, and whether it was measured.
func (r *floodResults) metric(work, unit string) (float64, bool) {
	v := r.data[work][unit]
	return median(v), len(v) > 0
}

// rotationTarget is the target of BenchmarkFloodRotation: an address
// rotation gets at most this multiple of the honest budget of its addresses.
// It is the bound the root module's rotation tests assert (rotationBound in
// flood_test.go); TestRotationTargetIsTheTestsBound fails if they differ.
const rotationTarget = 1.1

// floodTargets adds the rows of the address-flood targets.
func floodTargets(r *floodResults, add func(target, measured string, met bool, note string), missing func(target, note string)) {
	newcomers := []struct{ work, target, was string }{
		{"FloodNewcomers/issue11/maxKeys=1000/drained=1500", "flood: WithMaxKeys(1000), 1,500 drained, 100 newcomers: ≥ 90 served", "the overflow table served 0 %"},
		{"FloodNewcomers/issue11/maxKeys=1000/drained=1500/interleaved", "the same, a freshly drained address before each newcomer: ≥ 90 served", ""},
		{"FloodNewcomers/issue11/maxKeys=100k/drained=105k", "flood: WithMaxKeys(100,000), 105,000 drained, 1,000 newcomers: ≥ 900 served", "the overflow table served 15.5 %"},
	}
	for _, n := range newcomers {
		if v, ok := r.metric(n.work, "newcomers-%"); ok {
			add(n.target, fmt.Sprintf("%.1f %% served", v), v >= 90, n.was)
		} else {
			missing(n.target, "BenchmarkFloodNewcomers did not run")
		}
	}
	bound := fmt.Sprintf(": ≤ %g× the honest budget", rotationTarget)
	for _, w := range []struct{ work, target, was string }{
		{"FloodRotation/keep-one-token", "rotation: 2,000 addresses through WithMaxKeys(1000), keep one token" + bound, "56×"},
		{"FloodRotation/drain-wait-rotate", "rotation: drain, wait one refill interval, rotate, 10 cycles" + bound, "2.7×"},
	} {
		if v, ok := r.metric(w.work, "x-honest"); ok {
			add(w.target, fmt.Sprintf("%.2f×", v), v <= rotationTarget, "was "+w.was+" with the overflow table")
		} else {
			missing(w.target, "BenchmarkFloodRotation did not run")
		}
	}
	if v, ok := r.metric("FloodHeap", "B/maxkey"); ok {
		add("heap growth under 2,000,000 addresses at WithMaxKeys(100,000): ≤ 232 B per max key", fmt.Sprintf("%.1f B", v), v <= 232, "3 rows of 64 one-byte cells per key (was 107.7 B with rows of 28 cells, 90.9 B with 4 rows of 4 four-byte cells)")
	} else {
		missing("heap growth under a 2,000,000-address flood: ≤ 232 B per max key", "BenchmarkFloodHeap did not run")
	}
	if v, ok := r.metric("FloodNewKey", "ns/op"); ok {
		add("a request from a new key when the table is full: ≤ 5 µs", fmt.Sprintf("%.2f µs", v/1000), v <= 5000, "through the middleware, default headers")
	} else {
		missing("a request from a new key when the table is full: ≤ 5 µs", "BenchmarkFloodNewKey did not run")
	}
}

// printFloodTradeoff prints the share of newcomers served after floods of
// 1× to 32× the cap, drained or one request per address.
func printFloodTradeoff(r *floodResults) {
	type cell struct{ drained, single string }
	rows := map[int]*cell{}
	var xs []int
	for _, work := range r.workloads {
		rest, ok := strings.CutPrefix(work, "FloodNewcomers/tradeoff/maxKeys=10k/")
		if !ok {
			continue
		}
		kind, flood, _ := strings.Cut(rest, "/flood=")
		x, err := strconv.Atoi(strings.TrimSuffix(flood, "x"))
		if err != nil {
			continue
		}
		v, _ := r.metric(work, "newcomers-%")
		if rows[x] == nil {
			rows[x] = &cell{"—", "—"}
			xs = append(xs, x)
		}
		if kind == "drained" {
			rows[x].drained = fmt.Sprintf("%.1f %%", v)
		} else {
			rows[x].single = fmt.Sprintf("%.1f %%", v)
		}
	}
	if len(xs) == 0 {
		return
	}
	slices.Sort(xs)
	fmt.Printf("\n## Under an address flood\n\nNewcomers served (of 1,000, one request each) after a flood within one refill time, `WithMaxKeys(10000)`, 5/min (BenchmarkFloodNewcomers):\n\n| flood | addresses drained | one request per address |\n|---|---:|---:|\n")
	for _, x := range xs {
		fmt.Printf("| %d × cap | %s | %s |\n", x, rows[x].drained, rows[x].single)
	}
}
