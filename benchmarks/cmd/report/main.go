// Command report turns the raw output of the benchmarks (go test -bench
// format, several counts) into the Markdown tables of BENCHMARKS.md: the
// median per workload and contender, and ratios against the fastest peer.
//
//	go run ./cmd/report < results.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

var order = []string{"addrlimit", "addrlimit-noheaders", "clock", "clock-parallel", "clock+headers", "httprate", "ulule", "tollbooth", "go-limiter", "throttled", "rate-map"}

// peers are the libraries the targets compare against (not the baseline map).
var peers = []string{"httprate", "ulule", "tollbooth", "go-limiter", "throttled"}

type sample struct{ ns, bytes, allocs []float64 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func main() {
	retainedFile := flag.String("retained", "", "output of cmd/retained for every contender (tab-separated)")
	flag.Parse()
	data := map[string]map[string]*sample{} // workload -> lib -> samples
	var workloads []string
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // GOMAXPROCS suffix
		}
		work, lib, ok := strings.Cut(name, "/lib=")
		if !ok {
			continue
		}
		if data[work] == nil {
			data[work] = map[string]*sample{}
			workloads = append(workloads, work)
		}
		s := data[work][lib]
		if s == nil {
			s = &sample{}
			data[work][lib] = s
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			}
		}
	}
	printTargets(data, readRetained(*retainedFile))
	fmt.Printf("\n## Medians and ratios\n")
	for _, work := range workloads {
		libs := data[work]
		fastestPeer, fastest := "", 0.0
		for _, p := range peers {
			if s, ok := libs[p]; ok && (fastestPeer == "" || median(s.ns) < fastest) {
				fastestPeer, fastest = p, median(s.ns)
			}
		}
		fmt.Printf("\n### %s\n\n| library | ns/op | B/op | allocs/op | fastest peer ÷ this |\n|---|---:|---:|---:|---:|\n", work)
		for _, lib := range order {
			s, ok := libs[lib]
			if !ok {
				continue
			}
			ratio := "—"
			if fastest > 0 {
				ratio = fmt.Sprintf("%.2f×", fastest/median(s.ns))
			}
			fmt.Printf("| %s | %.0f | %.0f | %.0f | %s |\n", lib, median(s.ns), median(s.bytes), median(s.allocs), ratio)
		}
		if fastestPeer != "" {
			fmt.Printf("\nFastest peer: %s (%.0f ns/op). Medians of %d runs.\n", fastestPeer, fastest, len(libs[fastestPeer].ns))
		}
	}
}

// fastestPeer returns the smallest median ns/op of the peers in a workload.
func fastestPeer(libs map[string]*sample) float64 {
	best := 0.0
	for _, p := range peers {
		if s, ok := libs[p]; ok && (best == 0 || median(s.ns) < best) {
			best = median(s.ns)
		}
	}
	return best
}

func readRetained(path string) map[string]float64 {
	out := map[string]float64{}
	if path == "" {
		return out
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 4 {
			if v, err := strconv.ParseFloat(f[3], 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

// printTargets compares the figures with the targets of the performance issue.
func printTargets(data map[string]map[string]*sample, retained map[string]float64) {
	get := func(work, lib string) *sample {
		if s := data[work][lib]; s != nil {
			return s
		}
		return &sample{}
	}
	allowed, noHeaders := get("Allowed", "addrlimit"), get("Allowed", "addrlimit-noheaders")
	exempt, parallel := get("Exempt", "addrlimit"), get("AllowedParallel", "addrlimit")
	serial10k, million := get("Allowed10k", "addrlimit"), get("DistinctKeys1M", "addrlimit")
	a := median(allowed.ns)
	if a == 0 {
		return
	}
	rows := []struct {
		target, measured string
		met              bool
	}{
		{"allowed: ≥ 8× faster than the fastest peer", fmt.Sprintf("%.2f×", fastestPeer(data["Allowed"])/a), fastestPeer(data["Allowed"])/a >= 8},
		{"allowed: ≤ 1 allocation with headers", fmt.Sprintf("%.0f", median(allowed.allocs)), median(allowed.allocs) <= 1},
		{"allowed: 0 allocations with headers off", fmt.Sprintf("%.0f", median(noHeaders.allocs)), median(noHeaders.allocs) == 0},
		{"exempt: 0 allocations", fmt.Sprintf("%.0f", median(exempt.allocs)), median(exempt.allocs) == 0},
		{"exempt: at most one token digest more than allowed", fmt.Sprintf("%+.0f ns vs allowed", median(exempt.ns)-a), median(exempt.ns) <= a+300},
		{"parallel (10k addresses) ≤ 0.6× serial (one address)", fmt.Sprintf("%.2f×", median(parallel.ns)/a), median(parallel.ns)/a <= 0.6},
		{"parallel ≤ 0.6× serial, same 10k addresses", fmt.Sprintf("%.2f×", median(parallel.ns)/median(serial10k.ns)), median(serial10k.ns) > 0 && median(parallel.ns)/median(serial10k.ns) <= 0.6},
		{"the same, headers off (no garbage for the collector)", fmt.Sprintf("%.2f×", median(get("AllowedParallel", "addrlimit-noheaders").ns)/median(get("Allowed10k", "addrlimit-noheaders").ns)), median(get("AllowedParallel", "addrlimit-noheaders").ns)/median(get("Allowed10k", "addrlimit-noheaders").ns) <= 0.6},
		{"1,000,000 keys ≤ 3× one address", fmt.Sprintf("%.2f×", median(million.ns)/a), median(million.ns)/a <= 3},
	}
	if v, ok := retained["addrlimit"]; ok {
		rows = append(rows, struct {
			target, measured string
			met              bool
		}{"retained ≤ 40 bytes per tracked key", fmt.Sprintf("%.1f B", v), v <= 40})
	}
	fmt.Printf("\n## Targets\n\n| target | measured | met |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r.target, r.measured, map[bool]string{true: "yes", false: "**no**"}[r.met])
	}
	if f := data["Floor"]; f != nil {
		fmt.Printf("\nThe floor on this machine, with no limiting at all (BenchmarkFloor): reading the monotonic clock costs %.0f ns, and the clock plus setting the two draft header fields on a cleared header map %.0f ns per request. 8× the fastest peer would leave %.0f ns for everything. Two goroutines reading the clock at once take %.2f× the time of one (2.0× would be perfect scaling on 2 cores).\n",
			median(f["clock"].ns), median(f["clock+headers"].ns), fastestPeer(data["Allowed"])/8, median(f["clock"].ns)/median(f["clock-parallel"].ns))
	}
}
