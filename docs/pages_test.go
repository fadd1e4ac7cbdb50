package docs_test

// TestPagesGoBlocksCompile compiles every ```go block of every Markdown page
// of the repository (README.md, docs/*.md, redisstore/README.md, …: see
// pages), so that the code works when pasted. The rules for a block:
//
//   - A block that starts with a package clause (after comments) is a
//     complete file, built as written, each in a package of its own. A file
//     of package main needs its func main; a file whose package name ends in
//     _test is a test file (its tests are compiled, not run).
//   - Any other block is a function body. It is compiled inside
//
//	func(ctx context.Context, mux *http.ServeMux, tok *addrlimit.InternalToken, lim *addrlimit.Limiter) error
//
//     with those four variables given (a block may declare its own, which
//     shadow them), imports added for the package names it uses (the
//     standard library's, this repository's packages, and redis, prometheus,
//     promhttp, otel), and the variables it declares at its top level
//     counted as used: a snippet may stop once it has built what it shows.
//     Anything else (another package, a helper function, a type) needs a
//     complete file.
//   - A block fenced "```go nocompile" is skipped: only for code that needs
//     a module no module of this repository requires (say so in the text).
//     Any other info string starting with "go" is an error, so that no
//     block escapes by a typo.
//   - Errors are handled: an assignment to err must be followed by a
//     statement that reads err (if err != nil { ... }, return err, ...), and
//     no block may discard a result with _ from a constructor (a New... or
//     WithRetired call), whose error reports a misconfiguration.
//
// Every module of this repository that a block imports joins a temporary Go
// workspace, so blocks of nested modules (redisstore, promcollector, …) and
// of the third-party modules they require compile too, from the module
// cache. The blocks are checked with go vet, which type-checks test files
// as well, and the tests of test-file blocks are run. Failures name the
// page and line.

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readmeBlock is one ```go block of a page.
type readmeBlock struct {
	page string // the page, relative to the repository root
	line int    // line of the block's first line of code in its page
	code string // without the fence's indentation
	info string // the fence's info string: "go", "go nocompile", …
}

// readmeBlocks extracts the fenced blocks of a Markdown text whose info
// string starts with "go", also those indented inside list items.
func readmeBlocks(md string) []readmeBlock {
	var blocks []readmeBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " \t")
		info, ok := strings.CutPrefix(trimmed, "```")
		if !ok || !strings.HasPrefix(info, "go") {
			continue
		}
		indent := lines[i][:len(lines[i])-len(trimmed)]
		b := readmeBlock{line: i + 2, info: strings.TrimSpace(info)}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, strings.TrimPrefix(lines[i], indent))
		}
		b.code = strings.Join(code, "\n") + "\n"
		blocks = append(blocks, b)
	}
	return blocks
}

// readmeSkip is the info string of a block that is not compiled.
const readmeSkip = "go nocompile"

// snippetImports maps the package names a function-body block may use
// without importing them to their import paths; repoPackages adds this
// repository's.
var snippetImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "io": "io", "log": "log",
	"slog": "log/slog", "http": "net/http", "httptest": "net/http/httptest", "netip": "net/netip",
	"os": "os", "strconv": "strconv", "strings": "strings", "sync": "sync", "time": "time",
	"testing": "testing", "synctest": "testing/synctest", "json": "encoding/json", "expvar": "expvar",
	"tls": "crypto/tls", "x509": "crypto/x509", "credentials": "google.golang.org/grpc/credentials",
	"redis":      "github.com/redis/go-redis/v9",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
	"proxyproto": "github.com/pires/go-proxyproto",
	"net":        "net",
	"grpc":       "google.golang.org/grpc",
	"insecure":   "google.golang.org/grpc/credentials/insecure",
	"chi":        "github.com/go-chi/chi/v5",
	"echo":       "github.com/labstack/echo/v4",
	"gin":        "github.com/gin-gonic/gin",
}

// repoModule is one module of this repository, with the module paths its
// go.mod requires.
type repoModule struct {
	dir, path string
	requires  []string
}

// repoModules returns the modules of the repository rooted at root, except
// the release tooling.
func repoModules(t *testing.T, root string) []repoModule {
	var mods []repoModule
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m := repoModule{dir: filepath.Dir(p)}
		for _, l := range strings.Split(string(src), "\n") {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "require "))
			if path, ok := strings.CutPrefix(l, "module "); ok {
				m.path = strings.TrimSpace(path)
				continue
			}
			// A requirement line: "path vX.Y.Z" (with or without "require ").
			if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[1], "v") && strings.Contains(f[0], ".") {
				m.requires = append(m.requires, f[0])
			}
		}
		if m.path != "" {
			mods = append(mods, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// repoPackages adds to names the package name → import path of every
// non-internal package of mods.
func repoPackages(t *testing.T, mods []repoModule, names map[string]string) {
	for _, m := range mods {
		err := filepath.WalkDir(m.dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != m.dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "internal") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != m.dir {
					return filepath.SkipDir // another module
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.PackageClauseOnly)
			if err != nil || f.Name.Name == "main" {
				return nil
			}
			rel, _ := filepath.Rel(m.dir, filepath.Dir(p))
			path := m.path
			if rel != "." {
				path += "/" + filepath.ToSlash(rel)
			}
			if _, ok := names[f.Name.Name]; !ok {
				names[f.Name.Name] = path
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// isCompleteFile reports whether a block starts with a package clause.
func isCompleteFile(code string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.PackageClauseOnly)
	return err == nil && f.Name != nil
}

// snippetHeader is what a function-body block is compiled inside.
const snippetHeader = "func _(ctx context.Context, mux *http.ServeMux, tok *addrlimit.InternalToken, lim *addrlimit.Limiter) error {\n\t_, _, _, _ = ctx, mux, tok, lim\n\t{\n"

// wrapBody turns a function-body block into a file, returning it and the
// number of lines before the block's first line.
func wrapBody(code string, names map[string]string) (string, int, error) {
	// Parse once without imports to learn the names it uses and declares.
	probe := "package snippet\n\n" + snippetHeader + code + "\n\t}\n\treturn nil\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", probe, parser.ParseComments)
	if err != nil {
		return "", 0, err
	}
	imports := map[string]bool{"context": true, "net/http": true, names["addrlimit"]: true}
	for _, id := range f.Unresolved {
		if path, ok := names[id.Name]; ok {
			imports[path] = true
		}
	}
	fn := f.Decls[0].(*ast.FuncDecl)
	inner := fn.Body.List[1].(*ast.BlockStmt)
	// Count the block's top-level declarations as used, right after each.
	type insertion struct {
		at   int
		text string
	}
	var ins []insertion
	for _, st := range inner.List {
		var declared []string
		switch s := st.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, e := range s.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" && id.Name != "err" {
						declared = append(declared, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						if id.Name != "_" && id.Name != "err" {
							declared = append(declared, id.Name)
						}
					}
				}
			}
		}
		for _, name := range declared {
			ins = append(ins, insertion{fset.Position(st.End()).Offset, "; _ = " + name})
		}
	}
	terminated := false
	if n := len(inner.List); n > 0 {
		_, terminated = inner.List[n-1].(*ast.ReturnStmt)
	}
	// Rebuild: imports, header, body with insertions, footer.
	start := len("package snippet\n\n" + snippetHeader)
	body := probe[start : start+len(code)]
	sort.Slice(ins, func(i, j int) bool { return ins[i].at > ins[j].at })
	for _, in := range ins {
		at := in.at - start
		body = body[:at] + in.text + body[at:]
	}
	var paths []string
	for p := range imports {
		paths = append(paths, strconv.Quote(p))
	}
	sort.Strings(paths)
	head := "package snippet\n\nimport (\n\t" + strings.Join(paths, "\n\t") + "\n)\n\n" + snippetHeader
	tail := "\n\t}\n\treturn nil\n}\n"
	if terminated {
		tail = "\n\t}\n}\n"
	}
	return head + body + tail, strings.Count(head, "\n"), nil
}

// constructorDiscard matches a constructor whose error is thrown away.
var constructorDiscard = regexp.MustCompile(`,\s*_\s*:?=\s*(?:[A-Za-z_][A-Za-z0-9_]*\.)?(New[A-Za-z0-9_]*|WithRetired)\(`)

// uncheckedErrors returns the lines (1-based, in code) of assignments to err
// whose next statement does not read err.
func uncheckedErrors(code string, complete bool) ([]int, error) {
	src, offset := code, 0
	if !complete {
		src = "package p\nfunc _() {\n" + code + "\n}\n"
		offset = 2
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		return nil, err
	}
	var bad []int
	ast.Inspect(f, func(n ast.Node) bool {
		var list []ast.Stmt
		switch b := n.(type) {
		case *ast.BlockStmt:
			list = b.List
		case *ast.CaseClause:
			list = b.Body
		case *ast.CommClause:
			list = b.Body
		default:
			return true
		}
		for i, st := range list {
			a, ok := st.(*ast.AssignStmt)
			if !ok || !assignsErr(a) {
				continue
			}
			if i+1 < len(list) && readsErr(list[i+1]) {
				continue
			}
			bad = append(bad, fset.Position(a.Pos()).Line-offset)
		}
		return true
	})
	return bad, nil
}

func assignsErr(a *ast.AssignStmt) bool {
	for _, e := range a.Lhs {
		if id, ok := e.(*ast.Ident); ok && id.Name == "err" {
			return true
		}
	}
	return false
}

func readsErr(st ast.Stmt) bool {
	found := false
	var node ast.Node = st
	if a, ok := st.(*ast.AssignStmt); ok { // err := f(err) reads it; err := g() does not
		node = &ast.CallExpr{Fun: ast.NewIdent("_"), Args: a.Rhs}
	}
	ast.Inspect(node, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == "err" {
			found = true
		}
		return !found
	})
	return found
}

// repoRoot returns the repository root, the parent of this module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pages returns every Markdown page of the repository rooted at root,
// relative to it and sorted, except those in directories the go command
// ignores (.git, .ci, .github, testdata).
func pages(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			found = append(found, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	return found
}

func TestPagesGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the pages' blocks with go vet: not in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no go command on PATH to compile the pages' blocks with")
		}
		t.Skip("no go command on PATH")
	}
	root := repoRoot(t)
	var blocks []readmeBlock
	for _, page := range pages(t, root) {
		md, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range readmeBlocks(string(md)) {
			b.page = page
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block in any page")
	}
	mods := repoModules(t, root)
	names := map[string]string{}
	for k, v := range snippetImports {
		names[k] = v
	}
	repoPackages(t, mods, names)

	work := t.TempDir()
	snip := filepath.Join(work, "snippets")
	type placed struct {
		block  readmeBlock
		file   string // relative to snip
		offset int    // lines of the file before the block's first line
	}
	var files []placed
	imported := map[string]bool{}
	for _, b := range blocks {
		switch b.info {
		case "go":
		case readmeSkip:
			t.Logf("%s:%d: not compiled (%s)", b.page, b.line, readmeSkip)
			continue
		default:
			t.Errorf("%s:%d: fence info %q: write \"go\" (compiled) or %q", b.page, b.line-1, b.info, readmeSkip)
			continue
		}
		complete := isCompleteFile(b.code)
		for _, m := range constructorDiscard.FindAllStringIndex(b.code, -1) {
			t.Errorf("%s:%d: a constructor's error is discarded with _; handle it (it reports a misconfiguration)", b.page, b.line+strings.Count(b.code[:m[0]], "\n"))
		}
		bad, err := uncheckedErrors(b.code, complete)
		if err != nil {
			t.Errorf("%s:%d: the block does not parse as a %s: %v", b.page, b.line, map[bool]string{true: "Go file", false: "function body"}[complete], err)
			continue
		}
		for _, l := range bad {
			t.Errorf("%s:%d: err is assigned but the next statement does not check it", b.page, b.line+l-1)
		}
		p := placed{block: b}
		src := b.code
		name := "snippet.go"
		if complete {
			f, _ := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				imported[path] = true
			}
			if strings.HasSuffix(f.Name.Name, "_test") {
				name = "snippet_test.go"
			}
		} else {
			src, p.offset, err = wrapBody(b.code, names)
			if err != nil {
				t.Errorf("%s:%d: %v", b.page, b.line, err)
				continue
			}
			f, _ := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				imported[path] = true
			}
		}
		p.file = filepath.Join(fmt.Sprintf("%s_line%d", pageDir.Replace(b.page), b.line), name)
		if err := os.MkdirAll(filepath.Join(snip, filepath.Dir(p.file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snip, p.file), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}

	// The workspace: the snippets' module, every repository module they
	// import (the root always), and for a third-party import one repository
	// module that requires its module (the examples require the frameworks).
	goVersion := "1.26.0"
	uses := []string{snip}
	for _, m := range mods {
		need := m.dir == root
		for path := range imported {
			if path == m.path || strings.HasPrefix(path, m.path+"/") {
				need = true
			}
		}
		if need {
			uses = append(uses, m.dir)
		}
		if m.dir == root {
			if v := goDirective(t, filepath.Join(root, "go.mod")); v != "" {
				goVersion = v
			}
		}
	}
	provided := func(path string) bool {
		for _, u := range uses {
			for _, m := range mods {
				if m.dir != u {
					continue
				}
				if path == m.path || strings.HasPrefix(path, m.path+"/") {
					return true
				}
				for _, r := range m.requires {
					if path == r || strings.HasPrefix(path, r+"/") {
						return true
					}
				}
			}
		}
		return false
	}
	for _, path := range sortedKeys(imported) {
		if !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") || provided(path) {
			continue // the standard library, or already in the workspace
		}
	findModule:
		for _, m := range mods {
			for _, r := range m.requires {
				if path == r || strings.HasPrefix(path, r+"/") {
					uses = append(uses, m.dir)
					break findModule
				}
			}
		}
	}
	gowork := "go " + goVersion + "\n\nuse (\n"
	for _, u := range uses {
		gowork += "\t" + strconv.Quote(u) + "\n"
	}
	gowork += ")\n"
	if err := os.WriteFile(filepath.Join(work, "go.work"), []byte(gowork), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snip, "go.mod"), []byte("module readme.snippets\n\ngo "+goVersion+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK="+filepath.Join(work, "go.work"), "GOFLAGS=-buildvcs=false")
	cmd := exec.Command(goBin, "vet", "./...")
	cmd.Dir = snip
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil {
		// The pages' test files are run too: what they claim must hold.
		args := []string{"test", "-count=1"}
		for _, p := range files {
			if strings.HasSuffix(p.file, "_test.go") {
				args = append(args, "./"+filepath.ToSlash(filepath.Dir(p.file)))
			}
		}
		if len(args) == 2 {
			return
		}
		cmd := exec.Command(goBin, args...)
		cmd.Dir = snip
		cmd.Env = env
		if out, err = cmd.CombinedOutput(); err == nil {
			return
		}
	}
	// Map the compiler's (or the tests') positions back to page lines.
	reported := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		for _, p := range files {
			// "vet: README_md_line41/snippet.go:23:38: msg", "./README_md_line41/snippet.go:…"
			_, rest, ok := strings.Cut(line, filepath.ToSlash(p.file)+":")
			if !ok {
				continue
			}
			parts := strings.SplitN(rest, ":", 3) // line, column, message
			if l, err := strconv.Atoi(parts[0]); err == nil && len(parts) == 3 {
				t.Errorf("%s:%d: %s", p.block.page, p.block.line+l-1-p.offset, strings.TrimSpace(parts[2]))
				reported = true
			}
		}
	}
	if !reported {
		t.Errorf("the pages' blocks failed (package PAGE_lineN is the block whose code starts at line N of PAGE): %v\n%s", err, out)
	}
}

// pageDir turns a page's path into a directory name (a Go package path
// element): docs/grpc.md → docs_grpc_md.
var pageDir = strings.NewReplacer("/", "_", ".", "_", "-", "_")

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// goDirective returns the go directive of a go.mod file.
func goDirective(t *testing.T, gomod string) string {
	src, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestPagesHarnessFindsUnhandledErrors(t *testing.T) {
	// The proxy block of the README before it handled errors: both assignments
	// are reported (the compiler reports only the last one, as unused).
	old := "proxies, err := addrlimit.NewTrustedProxies(\"X-Forwarded-For\", p)\nlim, err := addrlimit.New(300, time.Minute, addrlimit.WithKeyFunc(proxies.Key))\n"
	bad, err := uncheckedErrors(old, false)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(bad) != "[1 2]" {
		t.Errorf("unchecked errors on lines %v, want [1 2]", bad)
	}
	fixed := "kf, err := f()\nif err != nil {\n\treturn err\n}\nerr = g(kf)\nreturn err\n"
	if bad, err := uncheckedErrors(fixed, false); err != nil || len(bad) != 0 {
		t.Errorf("handled errors reported on lines %v (%v)", bad, err)
	}
	for _, src := range []string{"lo, _ := addrlimit.NewLogObserver(l, time.Minute)", "p, _ = NewTrustedProxies(h)", "tok, _ := tok.WithRetired(s)"} {
		if !constructorDiscard.MatchString(src) {
			t.Errorf("%q: discarded constructor error not found", src)
		}
	}
	if constructorDiscard.MatchString("_, err := lim.Peek(ctx, \"\", k)") {
		t.Error("a discarded Decision is not a discarded error")
	}
	blocks := readmeBlocks("text\n\n  ```go\n  x := 1\n  \tif x > 0 {}\n  ```\n\n```golang\ny\n```\n```gopher\n```\n```text\nz\n```\n")
	if len(blocks) != 3 || blocks[0].line != 4 || blocks[0].code != "x := 1\n\tif x > 0 {}\n" || blocks[0].info != "go" {
		t.Fatalf("blocks: %+v", blocks)
	}
	if blocks[1].info != "golang" || blocks[2].info != "gopher" {
		t.Errorf("fences that look like Go are found, to be refused: %+v", blocks[1:])
	}
}
