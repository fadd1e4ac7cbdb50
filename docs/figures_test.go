package docs_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated figures of the pages from benchmarks/BENCHMARKS.md")

// benchmarks is what the pages quote from benchmarks/BENCHMARKS.md.
type benchmarks struct {
	md string
}

func readBenchmarks(t *testing.T, root string) benchmarks {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "benchmarks", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	return benchmarks{md: string(b)}
}

// table returns the rows of the first table after the heading line h,
// each row's cells trimmed, keyed by its first cell; the header row is
// also under "" (see column).
func (b benchmarks) table(t *testing.T, h string) map[string][]string {
	t.Helper()
	_, rest, ok := strings.Cut(b.md, "\n"+h+"\n")
	if !ok {
		t.Fatalf("BENCHMARKS.md has no heading %q", h)
	}
	rows := map[string][]string{}
	started := false
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "|") {
			if started {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !started {
			rows[""] = cells
		}
		started = true
		rows[cells[0]] = cells
	}
	if len(rows) < 3 {
		t.Fatalf("BENCHMARKS.md: no table after %q", h)
	}
	return rows
}

// column returns the index of the column headed name, failing the test
// when the table has none: figures are found by their header, so that a
// column added to a table of BENCHMARKS.md cannot shift them.
func column(t *testing.T, rows map[string][]string, name string) int {
	t.Helper()
	for i, h := range rows[""] {
		if h == name {
			return i
		}
	}
	t.Fatalf("BENCHMARKS.md: no column %q in a table headed %q", name, rows[""])
	return 0
}

// cell returns a row's cell, failing the test when it is missing.
func cell(t *testing.T, rows map[string][]string, row string, i int) string {
	t.Helper()
	r, ok := rows[row]
	if !ok || i >= len(r) {
		t.Fatalf("BENCHMARKS.md: no cell %d in row %q", i, row)
	}
	return r[i]
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(strings.ReplaceAll(s, ",", ""), "×"), " %"), 64)
	if err != nil {
		t.Fatalf("BENCHMARKS.md: %q is not a number", s)
	}
	return f
}

// thousands writes n with a comma between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// peers are the contenders that are other libraries.
var peers = []string{"httprate", "ulule", "tollbooth", "go-limiter", "throttled"}

// fastest returns the peer with the smallest value in column i.
func fastest(t *testing.T, rows map[string][]string, i int) (string, float64) {
	t.Helper()
	best, min := "", math.Inf(1)
	for _, p := range peers {
		if v := num(t, cell(t, rows, p, i)); v < min {
			best, min = p, v
		}
	}
	return best, min
}

// headline is the README's table of figures.
func (b benchmarks) headline(t *testing.T) string {
	var s strings.Builder
	s.WriteString("| workload | addrlimit | fastest peer | fastest peer ÷ addrlimit |\n|---|---:|---:|---:|\n")
	inProcess := func(label, table, lib string, peer bool) {
		rows := b.table(t, "### "+table)
		nsCol, allocsCol := column(t, rows, "ns/op"), column(t, rows, "allocs/op")
		fmt.Fprintf(&s, "| %s | %s ns, %s allocs | ", label, thousands(int(num(t, cell(t, rows, lib, nsCol)))), cell(t, rows, lib, allocsCol))
		if peer {
			p, ns := fastest(t, rows, nsCol)
			fmt.Fprintf(&s, "%s ns, %s allocs (%s) | %.1f× |\n", thousands(int(ns)), cell(t, rows, p, allocsCol), p, num(t, cell(t, rows, lib, column(t, rows, "fastest peer ÷ this"))))
		} else {
			s.WriteString("— | — |\n")
		}
	}
	inProcess("allowed request, one address, draft headers", "Allowed", "addrlimit", true)
	inProcess("allowed request, headers off", "Allowed", "addrlimit-noheaders", true)
	inProcess("denied request (the default 429)", "Denied", "addrlimit", true)
	inProcess("1,000,000 distinct addresses", "DistinctKeys1M", "addrlimit", true)
	inProcess("exempt request (internal token)", "Exempt", "addrlimit", false)

	ret := b.table(t, "## Retained heap per tracked key after 1,000,000 distinct addresses")
	perKey := column(t, ret, "bytes per key")
	p, bytes := fastest(t, ret, perKey)
	fmt.Fprintf(&s, "| retained heap per tracked address | %s B | %.1f B (%s) | |\n", cell(t, ret, "addrlimit", perKey), bytes, p)

	e2e := b.table(t, "## End to end")
	lostCol := column(t, e2e, "lost vs bare")
	p, lost := fastest(t, e2e, lostCol)
	fmt.Fprintf(&s, "| end to end: throughput lost (net/http on one core, wrk on the other) | %s | %.1f %% (%s) | |\n", cell(t, e2e, "addrlimit", lostCol), lost, p)

	fleet := b.table(t, "### Fleet")
	fleetNs := column(t, fleet, "ns/op")
	ours, theirs := num(t, cell(t, fleet, "redisstore/callers=64", fleetNs)), num(t, cell(t, fleet, "redis_rate/callers=64", fleetNs))
	fmt.Fprintf(&s, "| fleet store, 64 concurrent callers, Redis on the same 2 cores | %s decisions/s | %s (redis_rate) | %.1f× |\n",
		thousands(int(math.Round(1e9/ours/1000))*1000), thousands(int(math.Round(1e9/theirs/1000))*1000), theirs/ours)

	_, machine, _ := strings.Cut(b.md, "\n- Machine: ")
	machine, _, _ = strings.Cut(machine, " (")
	_, versions, _ := strings.Cut(b.md, "\n- Versions: ")
	versions, _, _ = strings.Cut(versions, "\n")
	fmt.Fprintf(&s, "\nMedians from one run of run.sh on %s; peers as measured: %s.\n", machine, versions)
	return s.String()
}

// decisionsPerSecond formats 10⁹/ns: one decimal below 10k.
func decisionsPerSecond(ns float64) string {
	d := 1e9 / ns
	if d < 10000 {
		return fmt.Sprintf("%.1fk", d/1000)
	}
	return fmt.Sprintf("%.0fk", d/1000)
}

// fleet is docs/redis.md's throughput table.
func (b benchmarks) fleet(t *testing.T) string {
	rows := b.table(t, "### Fleet")
	var s strings.Builder
	s.WriteString("| concurrent callers | go-redis/redis_rate v10 | redisstore | redisstore, `WithMaxBatch(1)` |\n|---:|---:|---:|---:|\n")
	ns := column(t, rows, "ns/op")
	for _, c := range []string{"1", "16", "64"} {
		rr := num(t, cell(t, rows, "redis_rate/callers="+c, ns))
		rs := num(t, cell(t, rows, "redisstore/callers="+c, ns))
		nb := num(t, cell(t, rows, "redisstore-nobatch/callers="+c, ns))
		fmt.Fprintf(&s, "| %s | %s decisions/s | %s (%.1f×) | %s |\n", c, decisionsPerSecond(rr), decisionsPerSecond(rs), rr/rs, decisionsPerSecond(nb))
	}
	return s.String()
}

// generated is a block of a page between two markers, rewritten with
// -update.
type generated struct {
	page  string
	name  string // the marker's name: <!-- NAME: generated from … -->
	build func(benchmarks, *testing.T) string
}

var generatedBlocks = []generated{
	{"README.md", "figures", benchmarks.headline},
	{"docs/redis.md", "fleet figures", benchmarks.fleet},
}

// TestFiguresAgreeWithBenchmarks checks that the figure tables of the
// pages are what BENCHMARKS.md says (with -update it writes them), and
// that docs/performance.md lists every target BENCHMARKS.md marks as not
// met, with the figure it measured.
func TestFiguresAgreeWithBenchmarks(t *testing.T) {
	root := repoRoot(t)
	b := readBenchmarks(t, root)
	for _, g := range generatedBlocks {
		path := filepath.Join(root, g.page)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		begin := regexp.MustCompile(`(?m)^([ \t]*)<!-- ` + regexp.QuoteMeta(g.name) + `: generated from benchmarks/BENCHMARKS\.md[^\n]*-->\n`)
		m := begin.FindStringSubmatchIndex(string(src))
		if m == nil {
			t.Errorf("%s: no <!-- %s: generated from benchmarks/BENCHMARKS.md … --> marker", g.page, g.name)
			continue
		}
		indent := string(src[m[2]:m[3]])
		end := strings.Index(string(src[m[1]:]), indent+"<!-- end of "+g.name+" -->")
		if end < 0 {
			t.Errorf("%s: no <!-- end of %s --> marker", g.page, g.name)
			continue
		}
		var want strings.Builder
		for _, l := range strings.SplitAfter(g.build(b, t), "\n") {
			if strings.TrimSpace(l) != "" {
				want.WriteString(indent)
			}
			want.WriteString(l)
		}
		got := string(src[m[1] : m[1]+end])
		if got == want.String() {
			continue
		}
		if *update {
			out := string(src[:m[1]]) + want.String() + string(src[m[1]+end:])
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s rewritten", g.page, g.name)
			continue
		}
		t.Errorf("%s: the %s disagree with benchmarks/BENCHMARKS.md (cd docs && go test -run TestFigures -update):\n--- page\n%s--- BENCHMARKS.md\n%s", g.page, g.name, got, want.String())
	}
	checkUnmetTargets(t, root, b)
}

// checkUnmetTargets compares the bullets of docs/performance.md's "Targets
// not met" with the targets table of BENCHMARKS.md.
func checkUnmetTargets(t *testing.T, root string, b benchmarks) {
	src, err := os.ReadFile(filepath.Join(root, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## Targets not met\n")
	if !ok {
		t.Fatal(`docs/performance.md has no "## Targets not met"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// Each bullet: its bold targets (one bullet may answer two) and its text.
	listed := map[string]string{}
	for _, bullet := range strings.Split(section, "\n- ")[1:] {
		text := strings.Join(strings.Fields(bullet), " ")
		for _, m := range regexp.MustCompile(`\*\*(.+?)\*\*`).FindAllStringSubmatch(text, -1) {
			listed[m[1]] = text
		}
	}
	want := map[string]string{}
	for _, row := range b.table(t, "## Targets") {
		if len(row) < 3 || row[2] != "**no**" {
			continue
		}
		want[row[0]] = row[1]
	}
	for target, figure := range want {
		text, ok := listed[target]
		if !ok {
			t.Errorf("docs/performance.md does not list the unmet target %q (measured %s)", target, figure)
			continue
		}
		if !strings.Contains(text, figure) {
			t.Errorf("docs/performance.md: the target %q: BENCHMARKS.md measured %q, the page says: %s", target, figure, text)
		}
	}
	for target := range listed {
		if _, ok := want[target]; !ok {
			t.Errorf("docs/performance.md lists %q, which is no unmet target of BENCHMARKS.md", target)
		}
	}
	if len(want) < 9 {
		t.Errorf("%d unmet targets found in BENCHMARKS.md; the table's format changed?", len(want))
	}
}

// TestComparisonNamesThePinnedReleases checks that the comparison table
// describes the peers at the releases the benchmarks module pins.
func TestComparisonNamesThePinnedReleases(t *testing.T) {
	root := repoRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "benchmarks", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "comparison.md"))
	if err != nil {
		t.Fatal(err)
	}
	header := ""
	for _, l := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(l, "| | addrlimit |") {
			header = l
			break
		}
	}
	if header == "" {
		t.Fatal("docs/comparison.md has no table whose header starts with | | addrlimit |")
	}
	names := map[string]string{
		"github.com/go-chi/httprate":        "go-chi/httprate",
		"github.com/ulule/limiter/v3":       "ulule/limiter",
		"github.com/didip/tollbooth/v8":     "tollbooth",
		"github.com/sethvargo/go-limiter":   "sethvargo/go-limiter",
		"github.com/throttled/throttled/v2": "throttled",
	}
	found := 0
	for _, l := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "require "))
		if len(f) < 2 {
			continue
		}
		name, ok := names[f[0]]
		if !ok {
			continue
		}
		found++
		if want := name + " " + f[1]; !strings.Contains(header, want) {
			t.Errorf("the benchmarks module pins %s %s; the comparison's header does not name %q:\n%s", f[0], f[1], want, header)
		}
	}
	if found != len(names) {
		t.Errorf("benchmarks/go.mod requires %d of the %d peers the comparison describes", found, len(names))
	}
}
