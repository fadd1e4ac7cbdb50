package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// An attribute of a LogObserver line, as observe.go builds it.
var logAttr = regexp.MustCompile(`slog\.[A-Za-z0-9]+\("([a-z_]+)"`)

// TestLogObserverAttributesListed checks that docs/observability.md's
// description of the log observer names every attribute its lines carry,
// as observe.go writes them.
func TestLogObserverAttributesListed(t *testing.T) {
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "observe.go"))
	if err != nil {
		t.Fatal(err)
	}
	attrs := logAttr.FindAllStringSubmatch(string(src), -1)
	if len(attrs) < 10 {
		t.Fatalf("found %d slog attributes in observe.go, want the log line's dozen: is the pattern stale?", len(attrs))
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, bullet, ok := strings.Cut(string(page), "\n- `NewLogObserver(")
	if !ok {
		t.Fatal("docs/observability.md has no bullet on NewLogObserver")
	}
	bullet, _, _ = strings.Cut(bullet, "\n- ")
	for _, a := range attrs {
		if !strings.Contains(bullet, "`"+a[1]+"`") {
			t.Errorf("docs/observability.md's NewLogObserver bullet does not name the attribute %s", a[1])
		}
	}
}
