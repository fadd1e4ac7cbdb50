package addrlimit_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueCitation matches a reference to the project's issue tracker: the
// word issue followed by a number (with or without #), or "the issue" in
// the possessive, which a reader of the code cannot open. Benchmark names
// such as issue11/... are kept.
var issueCitation = regexp.MustCompile(`(?i)\bissue #?[0-9]+\b|\bthe issue's\b`)

// TestNoGoFileCitesAnIssue checks every Go file of every module in the
// repository: a comment says the reason itself instead of citing an issue
// by number (there were 40 such lines in 14 files).
func TestNoGoFileCitesAnIssue(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := issueCitation.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q: say the reason itself", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
