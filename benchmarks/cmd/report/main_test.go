package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	res := parseBench(strings.NewReader(`goos: linux
BenchmarkAllowed/lib=addrlimit-2         	 2885877	       300.0 ns/op	      36 B/op	       0 allocs/op
BenchmarkAllowed/lib=addrlimit-2         	 2885877	       320.0 ns/op	      36 B/op	       0 allocs/op
BenchmarkAllowed/lib=httprate-2          	  600000	      2000 ns/op	     176 B/op	      10 allocs/op
BenchmarkAllowedLimits/limit=5000/lib=addrlimit-2 	 100	 310 ns/op	 36 B/op	 0 allocs/op
BenchmarkNoLib-2 	 100	 5 ns/op
`))
	if got := res.ns("Allowed", "addrlimit"); got != 310 {
		t.Errorf("median of 300 and 320 = %v", got)
	}
	if got := res.ns("AllowedLimits/limit=5000", "addrlimit"); got != 310 {
		t.Errorf("limit series: %v", got)
	}
	if name, ns := res.fastestPeer("Allowed"); name != "httprate" || ns != 2000 {
		t.Errorf("fastest peer %s %v", name, ns)
	}
	if len(res.workloads) != 2 {
		t.Errorf("workloads %v", res.workloads)
	}
}

func TestE2ELoss(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e2e.txt")
	data := "# pinned=yes\n1\tbare\t100\t0\n1\taddrlimit\t90\t0\n2\taddrlimit\t45\t0\n2\tbare\t50\t0\n3\tbare\t100\t0\n3\taddrlimit\t70\t2\nbroken line\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	e := readE2E(path)
	if e == nil || !e.ok() || e.settings != "pinned=yes" {
		t.Fatalf("%+v", e)
	}
	// Per-round losses 10 %, 10 %, 30 %: the median is 10 %, though the
	// median rates (90 vs 100) would say the same only by chance.
	if got := e.loss("addrlimit"); math.Abs(got-0.1) > 1e-9 {
		t.Errorf("loss %v, want 0.1", got)
	}
	// Per request, 1/90 − 1/100, 1/45 − 1/50, 1/70 − 1/100 of a second
	// (1.11, 2.22 and 4.29 ms): the median is 2.22 ms, though round 2 lost
	// the same share as round 1.
	if got, want := e.addedCPU("addrlimit"), 1e9/45-1e9/50; math.Abs(got-want) > 1e-3 {
		t.Errorf("added CPU %v ns, want %v", got, want)
	}
	if e.non2xx["addrlimit"] != 2 {
		t.Errorf("non-2xx %d", e.non2xx["addrlimit"])
	}
	if readE2E(filepath.Join(t.TempDir(), "missing")) != nil {
		t.Error("a missing file gives results")
	}
}

func TestCumulative(t *testing.T) {
	cum := cumulative(strings.Split(`      flat  flat%   sum%        cum   cum%
     0.11s  9.17%  9.17%      1.01s 84.17%  github.com/addrlimit/addrlimit/benchmarks.init.func2.(*Limiter).Handler.2
         0     0% 56.67%       70ms  5.83%  github.com/addrlimit/addrlimit.(*Limiter).now (inline)
         0     0% 56.67%     1.20s   100%  testing.(*B).runN
`, "\n"))
	for name, want := range map[string]float64{
		"testing.(*B).runN":                             1.2,
		"github.com/addrlimit/addrlimit.(*Limiter).now": 0.07,
		"github.com/addrlimit/addrlimit/benchmarks.init.func2.(*Limiter).Handler.2": 1.01,
	} {
		if got := cum[name]; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	for in, want := range map[string]float64{"1.5s": 1.5, "250ms": 0.25, "40us": 40e-6, "3µs": 3e-6, "7ns": 7e-9} {
		if got, ok := seconds(in); !ok || math.Abs(got-want) > 1e-15 {
			t.Errorf("seconds(%q) = %v, %v", in, got, ok)
		}
	}
	if _, ok := seconds("12%"); ok {
		t.Error("seconds accepts a percentage")
	}
}

// BenchmarkServe's target compares the CPU each contender adds to the bare
// handler; at GOMAXPROCS 1 the names carry no suffix to strip.
func TestServeTarget(t *testing.T) {
	res := parseBench(strings.NewReader(`BenchmarkServe/lib=bare 	 100	 9000 ns/op	 7000 cpu-ns/op	 1312 B/op	 12 allocs/op
BenchmarkServe/lib=headers-only 	 100	 9000 ns/op	 9000 cpu-ns/op	 2128 B/op	 18 allocs/op
BenchmarkServe/lib=addrlimit 	 100	 9000 ns/op	 10000 cpu-ns/op	 2129 B/op	 16 allocs/op
BenchmarkServe/lib=go-limiter 	 100	 9000 ns/op	 12000 cpu-ns/op	 2296 B/op	 25 allocs/op
BenchmarkServe/lib=tollbooth 	 100	 9000 ns/op	 17000 cpu-ns/op	 2720 B/op	 41 allocs/op
`))
	r, ok := serveTarget(res)
	if !ok {
		t.Fatal("no target row")
	}
	if want := "3000 ns vs 5000 ns (go-limiter): 0.60×"; r.measured != want || r.met {
		t.Errorf("measured %q (met %v), want %q, not met", r.measured, r.met, want)
	}
	if !strings.Contains(r.note, "add 2000 ns, 0.40×") {
		t.Errorf("note %q lacks what headers-only adds", r.note)
	}
	// Noise larger than what addrlimit adds: no ratio, and neither met nor
	// unmet.
	noisy := parseBench(strings.NewReader(`BenchmarkServe/lib=bare 	 100	 9000 ns/op	 12000 cpu-ns/op	 1312 B/op	 12 allocs/op
BenchmarkServe/lib=addrlimit 	 100	 9000 ns/op	 11990 cpu-ns/op	 2129 B/op	 16 allocs/op
BenchmarkServe/lib=go-limiter 	 100	 9000 ns/op	 15000 cpu-ns/op	 2296 B/op	 25 allocs/op
`))
	if r, ok := serveTarget(noisy); !ok || r.met || r.measuredOK || r.measured != "not resolved" {
		t.Errorf("a run where addrlimit costs less than the bare handler: %+v", r)
	}
	if _, ok := serveTarget(parseBench(strings.NewReader(""))); ok {
		t.Error("a target row without figures")
	}
}
