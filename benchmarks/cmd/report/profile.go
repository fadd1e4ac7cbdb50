package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// parts are the stages of a request through addrlimit, matched against the
// function names of a pprof -top table; each is shown with its cumulative
// share of the benchmark loop. Stages indented by two spaces are inside the
// one above.
var parts = []struct {
	label string
	re    *regexp.Regexp
}{
	{"addrlimit's handler, all of it", regexp.MustCompile(`\(\*Limiter\)\.Handler\.`)},
	{"  decide: exemption, policy, key, charge", regexp.MustCompile(`addrlimit\.\(\*Limiter\)\.decide$`)},
	{"    policy and key", regexp.MustCompile(`addrlimit\.\(\*Limiter\)\.policyAndKey$`)},
	{"      peer address (parse RemoteAddr)", regexp.MustCompile(`addrlimit\.peerAddr$`)},
	{"    charge", regexp.MustCompile(`addrlimit\.\(\*Limiter\)\.charge$`)},
	{"      key hash (maphash)", regexp.MustCompile(`addrlimit\.bucketKey\.hash$`)},
	{"      clock (time.Since)", regexp.MustCompile(`addrlimit\.\(\*Limiter\)\.now$`)},
	{"      bucket table (shard lock, map, GCRA)", regexp.MustCompile(`bucket\.\(\*Table\)\.Take$`)},
	{"  quota fields (headers.Writer)", regexp.MustCompile(`headers\.\(\*Writer\)\.write$`)},
	{"    header map inserts (net/http Header)", regexp.MustCompile(`^runtime\.mapassign_faststr$`)},
	{"    arena (sync.Pool get/put, chunk allocation)", regexp.MustCompile(`headers\.\(\*arena\)\.(get|put)$`)},
	{"  the 429 (refuse)", regexp.MustCompile(`addrlimit\.\(\*Limiter\)\.refuse$`)},
	{"harness: clearing the header map per call", regexp.MustCompile(`^runtime\.mapclear$`)},
	{"GC work in the loop (write barriers, assists)", regexp.MustCompile(`^(gcWriteBarrier|runtime\.gcAssistAlloc)$`)},
	{"preemption (GC stops, signals)", regexp.MustCompile(`^runtime\.asyncPreempt$`)},
}

// cumulative returns the cum seconds of every function in a pprof -top
// table ("flat flat% sum% cum cum% name").
func cumulative(lines []string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		if v, ok := seconds(f[3]); ok {
			name := strings.TrimSuffix(strings.Join(f[5:], " "), " (inline)")
			out[name] = max(out[name], v)
		}
	}
	return out
}

// seconds parses pprof's durations: "1.23s", "450ms", "12us".
func seconds(s string) (float64, bool) {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}, {"s", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			return v * u.scale, err == nil
		}
	}
	return 0, false
}

// printProfile shows where the time of one profiled benchmark goes.
func printProfile(name string, nsPerOp float64, lines []string) {
	cum := cumulative(lines)
	var loop float64
	for fn, v := range cum {
		if strings.HasSuffix(fn, "testing.(*B).runN") {
			loop = v
		}
	}
	if loop == 0 {
		return
	}
	var bg float64
	for fn, v := range cum {
		if fn == "runtime.gcBgMarkWorker" {
			bg = v
		}
	}
	fmt.Printf("\n## Where the time goes: %s path\n\n", name)
	fmt.Printf("`go test -bench '^Benchmark%s$/^lib=addrlimit$' -benchtime 3s -cpuprofile`, then `go tool pprof -top`\n", strings.ToUpper(name[:1])+name[1:])
	fmt.Printf("(results/profile-%s.txt). Shares are cumulative, of the benchmark loop; ns are those shares\n", name)
	fmt.Printf("of the median ns/op above (%.0f ns). Inlined code counts with its caller.\n\n", nsPerOp)
	fmt.Printf("| stage | share | ≈ ns/op |\n|---|---:|---:|\n")
	for _, p := range parts {
		var v float64
		for fn, c := range cum {
			if p.re.MatchString(fn) {
				v = max(v, c)
			}
		}
		if v == 0 {
			continue
		}
		label := strings.ReplaceAll(p.label, "  ", "&nbsp;&nbsp;")
		fmt.Printf("| %s | %.0f %% | %.0f |\n", label, 100*v/loop, v/loop*nsPerOp)
	}
	if bg > 0 {
		fmt.Printf("\nThe garbage collector's background marking ran %.0f %% as long as the loop, on the other core.\n", 100*bg/loop)
	}
}
