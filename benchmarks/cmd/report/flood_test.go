package main

import (
	"strings"
	"testing"
)

func TestFloodTargets(t *testing.T) {
	r := parseFlood(strings.NewReader(`goos: linux
BenchmarkFloodNewcomers/issue11/maxKeys=1000/drained=1500-2 	 1	 5000 ns/op	 100.0 newcomers-%
BenchmarkFloodNewcomers/issue11/maxKeys=1000/drained=1500-2 	 1	 5000 ns/op	 80.00 newcomers-%
BenchmarkFloodNewcomers/issue11/maxKeys=1000/drained=1500/interleaved-2 	 1	 5000 ns/op	 89.00 newcomers-%
BenchmarkFloodNewcomers/tradeoff/maxKeys=10k/drained/flood=4x-2 	 1	 5000 ns/op	 93.30 newcomers-%
BenchmarkFloodRotation/keep-one-token-2 	 1	 2000000000 ns/op	 0.9700 x-honest
BenchmarkFloodHeap-2 	 1	 900000000 ns/op	 140.0 B/maxkey
BenchmarkFloodNewKey-2 	 1000000	 1500 ns/op	 0 B/op	 0 allocs/op	 1.000 evictions/op
BenchmarkAllowed/lib=addrlimit-2 	 1000	 300 ns/op
`))
	got := map[string]string{}
	met := map[string]bool{}
	add := func(target, measured string, ok bool, _ string) { got[target], met[target] = measured, ok }
	var absent []string
	floodTargets(r, add, func(target, _ string) { absent = append(absent, target) })

	check := func(prefix, measured string, ok bool) {
		t.Helper()
		for target, m := range got {
			if strings.HasPrefix(target, prefix) {
				if m != measured || met[target] != ok {
					t.Errorf("%s: %q met=%v, want %q met=%v", target, m, met[target], measured, ok)
				}
				return
			}
		}
		t.Errorf("no row %q in %v", prefix, got)
	}
	check("flood: WithMaxKeys(1000)", "90.0 % served", true) // median of 100 and 80
	check("the same, a freshly drained", "89.0 % served", false)
	check("rotation: 2,000 addresses", "0.97×", true)
	check("heap growth", "140.0 B", false)
	check("a request from a new key", "1.50 µs", true)
	if len(absent) != 2 {
		t.Errorf("missing rows %v, want the 100k scenario and drain-wait-rotate", absent)
	}
}
