package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
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
BenchmarkFloodRotation/drain-wait-rotate-2 	 1	 2000000000 ns/op	 1.200 x-honest
BenchmarkFloodHeap-2 	 1	 900000000 ns/op	 240.0 B/maxkey
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
	check("rotation: drain", "1.20×", false) // over 1.1, under the first target, 1.5
	check("heap growth", "240.0 B", false)
	check("a request from a new key", "1.50 µs", true)
	if len(absent) != 1 {
		t.Errorf("missing rows %v, want the 100k scenario", absent)
	}
	for target := range got {
		if want := fmt.Sprintf(": ≤ %g× the honest budget", rotationTarget); strings.HasPrefix(target, "rotation:") && !strings.HasSuffix(target, want) {
			t.Errorf("row %q does not end in %q", target, want)
		}
	}
}

// The report's rotation target is the bound the root module's rotation
// tests assert (rotationBound in ../../../flood_test.go, another module, so
// no constant can be shared): the report cannot print a target the tests do
// not hold. The bound must also be what those tests compare with.
func TestRotationTargetIsTheTestsBound(t *testing.T) {
	const file = "../../../flood_test.go"
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bound *ast.BasicLit
	uses := 0
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if name.Name == "rotationBound" && i < len(n.Values) {
					bound, _ = n.Values[i].(*ast.BasicLit)
				}
			}
			return false // the declaration is not a use
		case *ast.Ident:
			if n.Name == "rotationBound" {
				uses++
			}
		}
		return true
	})
	if bound == nil {
		t.Fatalf("%s declares no constant rotationBound with a literal value", file)
	}
	if uses == 0 {
		t.Errorf("%s declares rotationBound but no test uses it", file)
	}
	v, err := strconv.ParseFloat(bound.Value, 64)
	if err != nil {
		t.Fatalf("rotationBound = %s: %v", bound.Value, err)
	}
	if v != rotationTarget {
		t.Errorf("the tests bound a rotation at %g× the honest budget, the report prints the target %g×", v, rotationTarget)
	}
}
