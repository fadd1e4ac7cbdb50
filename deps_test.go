package addrlimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCoreImportsTheStandardLibraryOnly checks the README's claim: the
// package, package store and the internal packages import nothing outside
// the standard library (golang.org/x/time and testify appear in tests only).
func TestCoreImportsTheStandardLibraryOnly(t *testing.T) {
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append([]string{".", "store"}, dirs...) {
		files := parseProductionFiles(t, token.NewFileSet(), dir, parser.ImportsOnly)
		for _, name := range sortedNames(files) {
			for _, imp := range files[name].Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(path, "/")
				if strings.Contains(first, ".") && !strings.HasPrefix(path, "github.com/addrlimit/addrlimit/internal/") && path != "github.com/addrlimit/addrlimit/store" {
					t.Errorf("%s imports %s, outside the standard library", name, path)
				}
			}
		}
	}
}

// parseProductionFiles parses the non-test Go files of dir, by path.
func parseProductionFiles(t *testing.T, fset *token.FileSet, dir string, mode parser.Mode) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, mode)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return files
}

func sortedNames(files map[string]*ast.File) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
