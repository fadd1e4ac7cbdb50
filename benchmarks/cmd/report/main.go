// Command report turns the raw output of the benchmarks (go test -bench
// format, several counts) into the Markdown tables of BENCHMARKS.md: the
// targets, the median per workload and contender with ratios against the
// fastest peer, the end-to-end rounds, and where addrlimit's time goes.
//
//	go run ./cmd/report [-retained FILE] [-e2e FILE] [-profile FILE] [-profile-denied FILE] < results.txt
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

var order = []string{"bare", "headers-only", "addrlimit", "addrlimit-noheaders", "clock", "clock-parallel", "clock+headers", "httprate", "ulule", "tollbooth", "go-limiter", "throttled", "rate-map"}

// peers are the libraries the targets compare against (not the baseline map).
var peers = []string{"httprate", "ulule", "tollbooth", "go-limiter", "throttled"}

// limits are the workloads of the cliff target, in the order of the report.
var limits = []string{"300", "5000", "1000000", "1000000000"}

type sample struct{ ns, cpu, bytes, allocs []float64 }

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

// results holds the benchmark samples: workload -> lib -> samples.
type results struct {
	data      map[string]map[string]*sample
	workloads []string
}

// get returns the samples of lib in work, empty if there are none.
func (r *results) get(work, lib string) *sample {
	if s := r.data[work][lib]; s != nil {
		return s
	}
	return &sample{}
}

// ns returns the median ns/op of lib in work, 0 if it was not measured.
func (r *results) ns(work, lib string) float64 { return median(r.get(work, lib).ns) }

// fastestPeer returns the peer with the smallest median ns/op in work.
func (r *results) fastestPeer(work string) (string, float64) {
	name, best := "", 0.0
	for _, p := range peers {
		if s, ok := r.data[work][p]; ok && (name == "" || median(s.ns) < best) {
			name, best = p, median(s.ns)
		}
	}
	return name, best
}

// benchLine splits a result line of go test -bench into the benchmark's name
// (without "Benchmark" and the GOMAXPROCS suffix) and its fields; ok is false
// for other lines.
func benchLine(line string) (name string, fields []string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	name = strings.TrimPrefix(f[0], "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i] // GOMAXPROCS suffix (none when it is 1)
		}
	}
	return name, f, true
}

func parseBench(in io.Reader) *results {
	res := &results{data: map[string]map[string]*sample{}}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		name, f, ok := benchLine(sc.Text())
		if !ok {
			continue
		}
		work, lib, ok := strings.Cut(name, "/lib=")
		if !ok {
			continue
		}
		if res.data[work] == nil {
			res.data[work] = map[string]*sample{}
			res.workloads = append(res.workloads, work)
		}
		s := res.data[work][lib]
		if s == nil {
			s = &sample{}
			res.data[work][lib] = s
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "cpu-ns/op":
				s.cpu = append(s.cpu, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			}
		}
	}
	return res
}

func main() {
	retainedFile := flag.String("retained", "", "output of cmd/retained for every contender (tab-separated)")
	e2eFile := flag.String("e2e", "", "results of the end-to-end rounds of run.sh")
	profileFile := flag.String("profile", "", "pprof -top output of BenchmarkAllowed/lib=addrlimit")
	deniedProfile := flag.String("profile-denied", "", "pprof -top output of BenchmarkDenied/lib=addrlimit")
	flag.Parse()
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	res := parseBench(bytes.NewReader(raw))
	flood := parseFlood(bytes.NewReader(raw))
	e2e := readE2E(*e2eFile)
	printTargets(res, flood, readRetained(*retainedFile), e2e)
	printFloodTradeoff(flood)
	fmt.Printf("\n## Medians and ratios\n")
	for _, work := range res.workloads {
		printWorkload(res, work)
	}
	printE2E(e2e)
	printProfile("allowed", res.ns("Allowed", "addrlimit"), readLines(*profileFile))
	printProfile("denied", res.ns("Denied", "addrlimit"), readLines(*deniedProfile))
}

func printWorkload(res *results, work string) {
	libs := res.data[work]
	fastestPeer, fastest := res.fastestPeer(work)
	withCPU := false
	for _, s := range libs {
		withCPU = withCPU || len(s.cpu) > 0
	}
	if withCPU {
		fmt.Printf("\n### %s\n\n| library | ns/op | cpu-ns/op | B/op | allocs/op | fastest peer ÷ this |\n|---|---:|---:|---:|---:|---:|\n", work)
	} else {
		fmt.Printf("\n### %s\n\n| library | ns/op | B/op | allocs/op | fastest peer ÷ this |\n|---|---:|---:|---:|---:|\n", work)
	}
	names := slices.Clone(order)
	var others []string
	for lib := range libs {
		if !slices.Contains(order, lib) {
			others = append(others, lib)
		}
	}
	slices.Sort(others)
	for _, lib := range append(names, others...) {
		s, ok := libs[lib]
		if !ok {
			continue
		}
		ratio := "—"
		if fastest > 0 {
			ratio = fmt.Sprintf("%.2f×", fastest/median(s.ns))
		}
		if withCPU {
			fmt.Printf("| %s | %.0f | %.0f | %.0f | %.0f | %s |\n", lib, median(s.ns), median(s.cpu), median(s.bytes), median(s.allocs), ratio)
		} else {
			fmt.Printf("| %s | %.0f | %.0f | %.0f | %s |\n", lib, median(s.ns), median(s.bytes), median(s.allocs), ratio)
		}
	}
	if fastestPeer != "" {
		fmt.Printf("\nFastest peer: %s (%.0f ns/op). Medians of %d runs.\n", fastestPeer, fastest, len(libs[fastestPeer].ns))
	}
}

// serveTarget is the target row of BenchmarkServe (net/http's server path in
// memory): the CPU per request addrlimit adds to the bare handler, against
// half of what the fastest peer adds; the note gives what the two quota
// fields cost net/http without a limiter (headers-only). ok is false when
// the run has no such figures.
func serveTarget(res *results) (row, bool) {
	cpu := func(lib string) float64 { return median(res.get("Serve", lib).cpu) }
	bare, al := cpu("bare"), cpu("addrlimit")
	if bare == 0 || al == 0 {
		return row{}, false
	}
	peer, peerAdded := "", 0.0
	for _, p := range peers {
		if c := cpu(p); c > 0 && (peer == "" || c-bare < peerAdded) {
			peer, peerAdded = p, c-bare
		}
	}
	if peer == "" || peerAdded <= 0 {
		return row{}, false
	}
	if al <= bare {
		// Below the bare handler: this run's noise is larger than what
		// addrlimit adds, and no ratio of it means anything.
		return row{
			target:   "net/http's server path in memory (BenchmarkServe): addrlimit adds ≤ ½ of the CPU the fastest peer adds",
			measured: "not resolved",
			note:     fmt.Sprintf("addrlimit measured %.0f ns of CPU per request against the bare handler's %.0f ns: the run's noise exceeds what it adds; rerun on a quiet machine", al, bare),
		}, true
	}
	note := "CPU per request added to the bare handler, medians"
	if h := cpu("headers-only"); h > 0 {
		note += fmt.Sprintf("; the two quota fields alone (headers-only) add %.0f ns, %.2f× the peer's", h-bare, (h-bare)/peerAdded)
	}
	return row{
		target:     "net/http's server path in memory (BenchmarkServe): addrlimit adds ≤ ½ of the CPU the fastest peer adds",
		measured:   fmt.Sprintf("%.0f ns vs %.0f ns (%s): %.2f×", al-bare, peerAdded, peer, (al-bare)/peerAdded),
		met:        al-bare <= peerAdded/2,
		measuredOK: true,
		note:       note,
	}, true
}

func readLines(path string) []string {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\n")
}

func readRetained(path string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range readLines(path) {
		f := strings.Split(line, "\t")
		if len(f) == 4 {
			if v, err := strconv.ParseFloat(f[3], 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

type row struct {
	target, measured string
	met              bool
	measuredOK       bool // false: no figure in this run
	note             string
}

// printTargets compares the figures with the targets of the performance
// issues, the latest first.
func printTargets(res *results, flood *floodResults, retained map[string]float64, e2e *e2eResults) {
	allowed := res.get("Allowed", "addrlimit")
	a := median(allowed.ns)
	if a == 0 {
		return
	}
	var rows []row
	add := func(target, measured string, met bool, note string) {
		rows = append(rows, row{target, measured, met, true, note})
	}
	missing := func(target, note string) {
		rows = append(rows, row{target: target, measured: "not measured", note: note})
	}

	// One decision engine: in process against the fastest peer, two cores
	// against one, and end to end the server CPU added per request.
	peer, peerNs := res.fastestPeer("Allowed")
	if peerNs > 0 {
		add("allowed: ≥ 5× faster than the fastest peer, one address", fmt.Sprintf("%.2f× (%.0f ns vs %.0f ns, %s)", peerNs/a, a, peerNs, peer), peerNs/a >= 5, "")
	}
	if p, s := res.ns("AllowedParallel", "addrlimit"), res.ns("Allowed10k", "addrlimit"); p > 0 && s > 0 {
		add("two cores serve ≥ 1.6× what one core serves over the same 10,000 addresses, headers on",
			fmt.Sprintf("%.2f× (%.0f ns per request on one core, %.0f ns on two)", s/p, s, p), s/p >= 1.6, "")
	}
	if e2e != nil && e2e.ok() {
		al, peer, peerAdded := e2e.addedCPU("addrlimit"), "", 0.0
		for _, p := range peers {
			if c := e2e.addedCPU(p); len(e2e.rps[p]) > 0 && (peer == "" || c < peerAdded) {
				peer, peerAdded = p, c
			}
		}
		note := "1 ÷ requests/s of the server's one busy core, minus the bare handler's in the same round; median over rounds"
		if len(e2e.rps["headers-only"]) > 0 {
			note += fmt.Sprintf("; the two quota fields alone (headers-only) add %.0f ns", e2e.addedCPU("headers-only"))
		}
		add("end to end, the server CPU addrlimit adds per request ≤ 0.5× the fastest peer's",
			fmt.Sprintf("%.0f ns vs %.0f ns (%s): %.2f×", al, peerAdded, peer, al/peerAdded), peerAdded > 0 && al <= peerAdded/2, note)
	}

	// The cliff: every limit and burst costs the same.
	var nsByLimit []float64
	var allocs, shown []string
	maxAllocs := 0.0
	for _, l := range limits {
		s := res.get("AllowedLimits/limit="+l, "addrlimit")
		if len(s.ns) == 0 {
			continue
		}
		nsByLimit = append(nsByLimit, median(s.ns))
		shown = append(shown, fmt.Sprintf("%.0f", median(s.ns)))
		allocs = append(allocs, fmt.Sprintf("%.0f", median(s.allocs)))
		maxAllocs = max(maxAllocs, median(s.allocs))
	}
	if len(nsByLimit) > 0 {
		spread := slices.Max(nsByLimit)/slices.Min(nsByLimit) - 1
		add("allowed, limits 300 / 5,000 / 10⁶ / 10⁹ (burst = limit): 0 allocations",
			strings.Join(allocs, " / "), maxAllocs == 0, "header values past the tables are rendered into arena memory")
		note := "largest ÷ smallest median, in one run"
		if d := res.ns("AllowedDraining/limit=1000000000", "addrlimit"); d > 0 {
			note += fmt.Sprintf("; a bucket of 10⁹ being drained (every response a new count, rendered): %.0f ns, %.0f allocations",
				d, median(res.get("AllowedDraining/limit=1000000000", "addrlimit").allocs))
		}
		add("the same: no step in ns/op (spread ≤ 10 %)", fmt.Sprintf("%s ns (%+.0f %%)", strings.Join(shown, " / "), 100*spread), spread <= 0.10, note)
	} else {
		missing("allowed, limits 300 to 10⁹: 0 allocations and no step in ns/op", "BenchmarkAllowedLimits did not run")
	}

	// Denials.
	if d := res.get("Denied", "addrlimit"); len(d.ns) > 0 {
		add("denied ≤ 1.5× allowed", fmt.Sprintf("%.2f× (%.0f ns)", median(d.ns)/a, median(d.ns)), median(d.ns)/a <= 1.5,
			"the default 429 sets four fields more than an allowed response (Retry-After, Cache-Control, Content-Type, X-Content-Type-Options)")
		add("denied ≤ 1 allocation, default 429 response included", fmt.Sprintf("%.0f", median(d.allocs)), median(d.allocs) <= 1, "")
	}

	// The floor.
	if floor := res.ns("Floor", "clock+headers"); floor > 0 {
		add("allowed ≤ 2× the floor (clock + the two draft fields)", fmt.Sprintf("%.2f× (%.0f ns vs %.0f ns)", a/floor, a, floor), a/floor <= 2,
			"where the rest goes: see “Where the time goes” below")
	}

	// Parallel scaling.
	scaling := ""
	if f := res.data["Floor"]; f != nil && median(f["clock-parallel"].ns) > 0 {
		scaling = fmt.Sprintf("two goroutines reading the clock take %.2f× the time of one (2.0 = perfect scaling)", median(f["clock"].ns)/median(f["clock-parallel"].ns))
	}
	parallel, serial10k := res.ns("AllowedParallel", "addrlimit"), res.ns("Allowed10k", "addrlimit")
	if parallel > 0 {
		add("parallel (2 cores, 10k addresses) ≤ 0.8× serial (one address), headers on", fmt.Sprintf("%.2f×", parallel/a), parallel/a <= 0.8, scaling)
	}
	if parallel > 0 && serial10k > 0 {
		add("parallel ≤ 0.8× serial, same 10k addresses, headers on", fmt.Sprintf("%.2f×", parallel/serial10k), parallel/serial10k <= 0.8, "")
	}
	if p, s := res.ns("AllowedParallel", "addrlimit-noheaders"), res.ns("Allowed10k", "addrlimit-noheaders"); p > 0 && s > 0 {
		add("the same, headers off", fmt.Sprintf("%.2f×", p/s), p/s <= 0.8, "")
	}

	// End to end.
	if e2e != nil && e2e.ok() {
		al, peer, peerLoss := e2e.loss("addrlimit"), "", 0.0
		for _, p := range peers {
			if l := e2e.loss(p); len(e2e.rps[p]) > 0 && (peer == "" || l < peerLoss) {
				peer, peerLoss = p, l
			}
		}
		add("end to end: addrlimit (headers on) loses ≤ ½ of what the fastest peer loses",
			fmt.Sprintf("%.1f %% vs %.1f %% (%s): %.2f×", 100*al, 100*peerLoss, peer, al/peerLoss), peerLoss > 0 && al <= peerLoss/2,
			"throughput lost against the bare handler, median over rounds; see “End to end” below")
		if len(e2e.rps["headers-only"]) > 0 {
			floor := e2e.loss("headers-only")
			add("end to end, beyond the cost of sending the two quota fields at all (headers-only: no limiter, the same fields)",
				fmt.Sprintf("%.1f %% (addrlimit %.1f %% − headers-only %.1f %%)", 100*(al-floor), 100*al, 100*floor), al-floor <= peerLoss/2,
				"what the limiter itself costs end to end, against half of the fastest peer's loss")
		}
	} else {
		missing("end to end: addrlimit (headers on) loses ≤ ½ of what the fastest peer loses", "no wrk run in results/e2e.txt")
	}
	if row, ok := serveTarget(res); ok {
		rows = append(rows, row)
	}

	// The fleet path: benchmarks/redis_test.go reports Fleet/lib=<store>/callers=<n>.
	const callers = "/callers=64"
	if rr := res.ns("Fleet", "redis_rate"+callers); rr > 0 {
		best, bestLib := 0.0, ""
		for lib, s := range res.data["Fleet"] {
			if strings.HasSuffix(lib, callers) && lib != "redis_rate"+callers && (bestLib == "" || median(s.ns) < best) {
				best, bestLib = median(s.ns), strings.TrimSuffix(lib, callers)
			}
		}
		if best > 0 {
			add("fleet: ≥ 2× redis_rate's decisions/s at 64 concurrent requests", fmt.Sprintf("%.2f× (%s: %.0f vs %.0f decisions/s)", rr/best, bestLib, 1e9/best, 1e9/rr), rr/best >= 2,
				"decisions/s ratio = redis_rate's ns/op ÷ this store's, one run; Redis on the same 2 cores")
		}
		if one, mine := res.ns("Fleet", "redis_rate/callers=1"), res.ns("Fleet", "redisstore/callers=1"); one > 0 && mine > 0 {
			add("fleet: latency at one caller no worse than redis_rate", fmt.Sprintf("%.0f µs vs %.0f µs", mine/1000, one/1000), mine <= one*1.05, "median ns/op at 1 caller")
		}
	} else {
		missing("fleet: ≥ 2× redis_rate's decisions/s at 64 concurrent requests", "no Fleet/lib=redis_rate/callers=64 in this run")
	}

	// Under an address flood.
	floodTargets(flood, add, missing)

	// Earlier targets.
	fastest := func(work string) float64 { _, ns := res.fastestPeer(work); return ns }
	add("allowed: ≥ 8× faster than the fastest peer", fmt.Sprintf("%.2f×", fastest("Allowed")/a), fastest("Allowed")/a >= 8,
		fmt.Sprintf("8× the fastest peer leaves %.0f ns for everything", fastest("Allowed")/8))
	add("allowed: ≤ 1 allocation with headers", fmt.Sprintf("%.0f", median(allowed.allocs)), median(allowed.allocs) <= 1, "")
	noHeaders := res.get("Allowed", "addrlimit-noheaders")
	add("allowed: 0 allocations with headers off", fmt.Sprintf("%.0f", median(noHeaders.allocs)), median(noHeaders.allocs) == 0, "")
	exempt := res.get("Exempt", "addrlimit")
	add("exempt: 0 allocations", fmt.Sprintf("%.0f", median(exempt.allocs)), median(exempt.allocs) == 0, "")
	add("exempt: at most one token digest more than allowed", fmt.Sprintf("%+.0f ns vs allowed", median(exempt.ns)-a), median(exempt.ns) <= a+300, "")
	if m := res.ns("DistinctKeys1M", "addrlimit"); m > 0 {
		add("1,000,000 keys ≤ 3× one address", fmt.Sprintf("%.2f×", m/a), m/a <= 3, "")
	}
	if v, ok := retained["addrlimit"]; ok {
		add("retained ≤ 40 bytes per tracked key", fmt.Sprintf("%.1f B", v), v <= 40, "")
	}

	fmt.Printf("\n## Targets\n\n| target | measured | met | note |\n|---|---|---|---|\n")
	for _, r := range rows {
		met := map[bool]string{true: "yes", false: "**no**"}[r.met]
		if !r.measuredOK {
			met = "—"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.target, r.measured, met, r.note)
	}
	if f := res.data["Floor"]; f != nil {
		fmt.Printf("\nThe floor on this machine, with no limiting at all (BenchmarkFloor): reading the monotonic clock costs %.0f ns, and the clock plus setting the two draft header fields on a cleared header map %.0f ns per request.\n",
			median(f["clock"].ns), median(f["clock+headers"].ns))
	}
}
