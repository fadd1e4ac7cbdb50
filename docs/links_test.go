package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// withoutCode returns the lines of a Markdown page outside fenced blocks,
// with inline code removed, and reports for each line whether it is a
// heading.
func withoutCode(md string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " \t"), "```") {
			fenced = !fenced
			out = append(out, "")
			continue
		}
		if fenced {
			out = append(out, "")
			continue
		}
		out = append(out, inlineCode.ReplaceAllString(l, ""))
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a page: lower
// case, letters, digits, - and _ kept, spaces turned into -, the rest
// dropped; a repeated anchor gets -1, -2, ….
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " \t"), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestPagesLinksResolve checks every relative link of every page: the file
// or directory it names exists, and a #fragment names a heading of the
// page it points to. Nothing is skipped: a page linked before it exists
// fails until it is added.
func TestPagesLinksResolve(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	for _, page := range pages(t, root) {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range withoutCode(string(src)) {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page)
				if path != "" {
					file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: %s points outside the repository", page, i+1, target)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: %s: no such file or directory", page, i+1, target)
					continue
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: %s: a fragment of a page that is not Markdown", page, i+1, target)
					continue
				}
				dst, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(dst))[frag] {
					t.Errorf("%s:%d: %s: no heading with the anchor #%s", page, i+1, target, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: the link pattern no longer matches the pages", checked)
	}
}

func TestAnchorsAreGitHubs(t *testing.T) {
	got := anchors("# Metrics: Prometheus and OpenTelemetry side by side\n```\n# not a heading\n```\n### net/http\n## Many instances (Redis)\n## FAQ\n## FAQ\n")
	for _, want := range []string{"metrics-prometheus-and-opentelemetry-side-by-side", "nethttp", "many-instances-redis", "faq", "faq-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a fenced block is taken for a heading")
	}
}

// TestReadmeIsTheFirstHour holds the README to what a newcomer reads in
// their first hour: everything else is a page of docs/.
func TestReadmeIsTheFirstHour(t *testing.T) {
	const most = 350
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > most {
		t.Errorf("README.md has %d lines, want at most %d: move the detail to a page of docs/", n, most)
	}
}
