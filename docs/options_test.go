package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rootAPI returns, from the root package's source, the names of the
// functions that return an Option and the fields of each exported struct
// type.
func rootAPI(t *testing.T, root string) (options map[string]bool, fields map[string]map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	// Policy and Limit are aliases of package store's types: their fields
	// are written there.
	storeFiles, err := filepath.Glob(filepath.Join(root, "store", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, storeFiles...)
	options, fields = map[string]bool{}, map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil || !d.Name.IsExported() || d.Type.Results == nil || len(d.Type.Results.List) != 1 {
					continue
				}
				if id, ok := d.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
					options[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					fields[ts.Name.Name] = map[string]bool{}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							fields[ts.Name.Name][n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(options) == 0 {
		t.Fatal("the root package has no function returning an Option")
	}
	return options, fields
}

var optionRow = regexp.MustCompile("(?m)^\\| `(With[A-Za-z]+)\\(")

// TestOptionsTableIsTheAPI holds the options table of docs/decisions.md to
// the root package: one row for every function that returns an Option,
// none for a function that no longer exists.
func TestOptionsTableIsTheAPI(t *testing.T) {
	root := repoRoot(t)
	options, _ := rootAPI(t, root)
	b, err := os.ReadFile(filepath.Join(root, "docs", "decisions.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Options\n")
	if !ok {
		t.Fatal(`docs/decisions.md has no "## Options" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]bool{}
	for _, m := range optionRow.FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
		if !options[m[1]] {
			t.Errorf("docs/decisions.md's options table has a row for %s, which the root package does not declare", m[1])
		}
	}
	for _, o := range sortedKeys(options) {
		if !rows[o] {
			t.Errorf("docs/decisions.md's options table has no row for %s", o)
		}
	}
}

// A struct literal the prose names by its fields, `Policy{Name, Limits}`.
var fieldList = regexp.MustCompile("`(?:addrlimit\\.)?([A-Z][A-Za-z0-9]*)\\{([A-Z][A-Za-z0-9]*(?:, [A-Z][A-Za-z0-9]*)*)\\}`")

// TestProseNamesRealFields checks that every `Type{Field, Field}` the README
// and docs/ pages write for a struct of the root package names fields it has.
func TestProseNamesRealFields(t *testing.T) {
	root := repoRoot(t)
	_, fields := rootAPI(t, root)
	checked := 0
	for _, p := range pages(t, root) {
		if p != "README.md" && !strings.HasPrefix(p, "docs/") {
			continue // CHANGELOG.md describes earlier releases
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range fieldList.FindAllStringSubmatch(line, -1) {
				have, ok := fields[m[1]]
				if !ok {
					continue
				}
				checked++
				for _, f := range strings.Split(m[2], ", ") {
					if !have[f] {
						t.Errorf("%s:%d: %s has no field %s (%s)", p, i+1, m[1], f, m[0])
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no `Type{Field, …}` of the root package found in the pages: is the pattern stale?")
	}
}

// TestReadmeLinksEveryExampleFile checks that the README, which points a
// newcomer to the runnable examples, links every file of them.
func TestReadmeLinksEveryExampleFile(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "example*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example files in the root module: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := filepath.Base(f); !strings.Contains(string(readme), "]("+name+")") {
			t.Errorf("README.md does not link %s", name)
		}
	}
}
