package addrlimit_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreImportsTheStandardLibraryOnly checks the README's claim: the
// package and its internal packages import nothing outside the standard
// library (golang.org/x/time and testify appear in tests only).
func TestCoreImportsTheStandardLibraryOnly(t *testing.T) {
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append([]string{"."}, dirs...) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(path, "/")
				if strings.Contains(first, ".") && !strings.HasPrefix(path, "github.com/addrlimit/addrlimit/internal/") {
					t.Errorf("%s imports %s, outside the standard library", name, path)
				}
			}
		}
	}
}
