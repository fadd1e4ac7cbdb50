package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// e2eResults are the end-to-end rounds of run.sh: requests per second of
// each contender in each round, served by net/http on one core and loaded by
// wrk on the other.
type e2eResults struct {
	settings string                     // the # line: pinning, rounds, duration, connections
	rps      map[string]map[int]float64 // lib -> round -> requests/s
	non2xx   map[string]int             // lib -> responses other than 2xx and 3xx, all rounds
	libs     []string                   // in the order first seen
}

// readE2E parses lines "round<TAB>lib<TAB>requests/s<TAB>non-2xx"; nil if
// there are none.
func readE2E(path string) *e2eResults {
	e := &e2eResults{rps: map[string]map[int]float64{}, non2xx: map[string]int{}}
	for _, line := range readLines(path) {
		if strings.HasPrefix(line, "#") {
			e.settings = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			continue
		}
		round, err1 := strconv.Atoi(f[0])
		rps, err2 := strconv.ParseFloat(f[2], 64)
		bad, err3 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		lib := f[1]
		if e.rps[lib] == nil {
			e.rps[lib] = map[int]float64{}
			e.libs = append(e.libs, lib)
		}
		e.rps[lib][round] = rps
		e.non2xx[lib] += bad
	}
	if len(e.libs) == 0 {
		return nil
	}
	return e
}

// ok reports whether the bare handler and addrlimit were measured.
func (e *e2eResults) ok() bool { return len(e.rps["bare"]) > 0 && len(e.rps["addrlimit"]) > 0 }

// loss returns the median over rounds of the throughput lib lost against the
// bare handler of the same round (0.2: 20 % fewer requests per second).
func (e *e2eResults) loss(lib string) float64 {
	var losses []float64
	for round, rps := range e.rps[lib] {
		if bare := e.rps["bare"][round]; bare > 0 {
			losses = append(losses, 1-rps/bare)
		}
	}
	return median(losses)
}

// addedCPU returns the median over rounds of the server CPU per request
// lib adds to the bare handler of the same round, in nanoseconds: the
// server runs on one core that the load keeps busy, so a request costs it
// 1/(requests/s) of a second.
func (e *e2eResults) addedCPU(lib string) float64 {
	var added []float64
	for round, rps := range e.rps[lib] {
		if bare := e.rps["bare"][round]; bare > 0 && rps > 0 {
			added = append(added, 1e9/rps-1e9/bare)
		}
	}
	return median(added)
}

func (e *e2eResults) medianRPS(lib string) float64 {
	var v []float64
	for _, rps := range e.rps[lib] {
		v = append(v, rps)
	}
	return median(v)
}

func printE2E(e *e2eResults) {
	if e == nil {
		return
	}
	fmt.Printf("\n## End to end\n\n")
	fmt.Printf("`cmd/e2e` serves the handler that writes 200 behind each contender with net/http, pinned to\n")
	fmt.Printf("core 0 (`taskset -c 0`, so GOMAXPROCS=1); wrk, pinned to core 1, loads it over loopback\n")
	fmt.Printf("(127.0.0.1) from one client address, under a policy that never refuses it (10^9 per minute,\n")
	fmt.Printf("burst 10^6). Contenders are interleaved in rounds, the order rotating, so that\n")
	fmt.Printf("noise hits all alike; each figure is a median over rounds, and the loss is measured against\n")
	fmt.Printf("the bare handler of the same round. Settings: %s.\n\n", e.settings)
	fmt.Printf("| library | requests/s | lost vs bare | server CPU added per request | rounds | non-2xx |\n|---|---:|---:|---:|---:|---:|\n")
	libs := slices.Clone(e.libs)
	slices.SortStableFunc(libs, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	for _, lib := range libs {
		lost, added := "—", "—"
		if lib != "bare" {
			lost, added = fmt.Sprintf("%.1f %%", 100*e.loss(lib)), fmt.Sprintf("%+.0f ns", e.addedCPU(lib))
		}
		fmt.Printf("| %s | %.0f | %s | %s | %d | %d |\n", lib, e.medianRPS(lib), lost, added, len(e.rps[lib]), e.non2xx[lib])
	}
	fmt.Printf("\nA non-2xx count above zero means that contender limited the load generator: its figure is not comparable.\n")
}
