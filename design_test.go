package addrlimit_test

import (
	"go/ast"
	"go/token"
	"os"
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

// TestSeamIsNotAStore checks that the seam has one face: the interface
// embeds nothing (no store.Store), its implementations have no exported
// method (a method only tests would call), and no package hook reaches
// them from outside (internal/storehook is gone: storetest calls a store
// through a Limiter built WithStore).
func TestSeamIsNotAStore(t *testing.T) {
	fset := token.NewFileSet()
	files := parseProductionFiles(t, fset, ".", 0)
	for _, name := range sortedNames(files) {
		for _, decl := range files[name].Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "seam" {
						continue
					}
					for _, m := range ts.Type.(*ast.InterfaceType).Methods.List {
						if len(m.Names) == 0 {
							t.Errorf("%s: seam embeds %s", fset.Position(m.Pos()), types(m.Type))
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || !d.Name.IsExported() {
					continue
				}
				if recv := types(d.Recv.List[0].Type); recv == "*memStore" || recv == "*failover" {
					t.Errorf("%s: %s has the exported method %s", fset.Position(d.Pos()), recv, d.Name.Name)
				}
			}
		}
	}
	if _, err := os.Stat("internal/storehook"); err == nil {
		t.Error("internal/storehook exists: a hook set in init() reaches the seam from outside")
	}
}

// types prints a type expression of the kinds a receiver or an embedded
// interface has.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "*" + types(e.X)
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// TestCancellationIsDroppedOnce checks that one function of the root
// package drops a request's cancellation (failover's detach), so that no
// layer has to remember to.
func TestCancellationIsDroppedOnce(t *testing.T) {
	fset := token.NewFileSet()
	files := parseProductionFiles(t, fset, ".", 0)
	var at []string
	for _, name := range sortedNames(files) {
		ast.Inspect(files[name], func(n ast.Node) bool {
			if s, ok := n.(*ast.SelectorExpr); ok && s.Sel.Name == "WithoutCancel" {
				at = append(at, fset.Position(n.Pos()).String())
			}
			return true
		})
	}
	if len(at) != 1 {
		t.Errorf("context.WithoutCancel is applied at %d places, want 1: %v", len(at), at)
	}
}

// TestPolicyHalvesAreSeparate checks that the Limiter's half of a policy
// (policyState: the header writer) and the store's half (lane: the table,
// the debts, the counters of remote decisions) are separate types, each
// declared beside the code that uses it.
func TestPolicyHalvesAreSeparate(t *testing.T) {
	fset := token.NewFileSet()
	files := parseProductionFiles(t, fset, ".", 0)
	storeFields := map[string]bool{"table": true, "debts": true, "allowed": true, "limited": true, "limitedBy": true, "lims": true}
	for _, name := range sortedNames(files) {
		ast.Inspect(files[name], func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, f := range st.Fields.List {
				for _, id := range f.Names {
					switch {
					case ts.Name.Name == "policyState" && storeFields[id.Name]:
						t.Errorf("%s: the Limiter's policyState holds the store's %s", fset.Position(id.Pos()), id.Name)
					case ts.Name.Name == "lane" && id.Name == "headers":
						t.Errorf("%s: the store's lane holds the Limiter's header writer", fset.Position(id.Pos()))
					}
				}
			}
			return true
		})
	}
}
