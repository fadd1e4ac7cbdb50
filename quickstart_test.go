package addrlimit_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestPackageDocShowsTheQuickStart checks that the package documentation's
// example is the body of the README's quick start, line for line, so that
// the first code a user reads is the same on both pages.
func TestPackageDocShowsTheQuickStart(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(md)
	start := strings.Index(readme, "## Quick start")
	if start < 0 {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	qs := readme[start:]
	from, to := strings.Index(qs, "func main() {\n"), strings.Index(qs, "\n}\n```")
	if from < 0 || to < from {
		t.Fatal("README.md's quick start has no func main")
	}
	var want []string
	for _, l := range strings.Split(qs[from+len("func main() {\n"):to], "\n") {
		want = append(want, strings.TrimPrefix(l, "\t"))
	}

	f, err := parser.ParseFile(token.NewFileSet(), "limiter.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(f.Doc.Text(), "\n") {
		if strings.HasPrefix(l, "\t") {
			got = append(got, l[1:])
		} else if len(got) > 0 {
			break // the first code block ends at the first line of text
		}
	}
	for len(got) > 0 && got[len(got)-1] == "" {
		got = got[:len(got)-1]
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("the package doc's first example is not the README's quick start body:\n--- package doc\n%s\n--- README\n%s", g, w)
	}
}
