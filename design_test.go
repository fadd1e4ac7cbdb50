package addrlimit_test

import (
	"go/ast"
	"go/token"
	"testing"
)

// TestOnlyTheSeamKnowsTheStore checks internal/DESIGN.md's claim that no
// function outside the seam asks whether a remote store is configured or
// which failure policy applies: in the root package's non-test code, the
// failure policies are named only where they are declared (options.go) and
// applied (failover.go), and the configured Store is compared with nil only
// in New, which picks the seam.
func TestOnlyTheSeamKnowsTheStore(t *testing.T) {
	fset := token.NewFileSet()
	files := parseProductionFiles(t, fset, ".", 0)
	for _, name := range sortedNames(files) {
		f := files[name]
		for _, decl := range f.Decls {
			fn := "(declarations)"
			if fd, ok := decl.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					switch n.Name {
					case "FailLocal", "FailOpen", "FailClosed":
						if name != "failover.go" && name != "options.go" {
							t.Errorf("%s: %s names %s: only failover.go applies a failure policy", fset.Position(n.Pos()), fn, n.Name)
						}
					}
				case *ast.BinaryExpr:
					if (isStoreField(n.X) && isNil(n.Y) || isStoreField(n.Y) && isNil(n.X)) && fn != "New" {
						t.Errorf("%s: %s asks whether a Store is configured: only New does, when it picks the seam", fset.Position(n.Pos()), fn)
					}
				}
				return true
			})
		}
	}
}

func isStoreField(e ast.Expr) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && s.Sel.Name == "store"
}

func isNil(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "nil"
}
