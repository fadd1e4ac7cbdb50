package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/constant"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
)

// loadModule type-checks the public packages of the module in dir: every
// package but commands (package main) and internal packages, sorted by path.
func loadModule(dir, modPath string) ([]*types.Package, error) {
	cfg := &packages.Config{
		Dir:  dir,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Env:  append(os.Environ(), "GOWORK=off"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	var out []*types.Package
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %v", p.PkgPath, e))
		}
		if p.Name == "main" || isInternal(p.PkgPath, modPath) || len(p.Errors) > 0 {
			continue
		}
		out = append(out, p.Types)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(out, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return out, nil
}

// isInternal reports whether pkgPath, a package of module modPath, is
// internal to it.
func isInternal(pkgPath, modPath string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkgPath, modPath), "/")
	for _, elem := range strings.Split(rel, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}

// apiSummary lists the exported API of pkgs, one declaration a
// line: per package its constants, variables, functions and types, each sorted
// by name, with a type's exported fields, interface methods and methods
// indented below it. Parameter names are kept (they document); other packages
// are qualified by their name.
func apiSummary(pkgs []*types.Package) string {
	var b strings.Builder
	for i, pkg := range pkgs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "package %s // import %q\n", pkg.Name(), pkg.Path())
		writePackageAPI(&b, pkg)
	}
	return b.String()
}

func writePackageAPI(b *strings.Builder, pkg *types.Package) {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	ts := func(t types.Type) string { return types.TypeString(t, qual) }
	scope := pkg.Scope()
	var consts, vars, funcs, typs []types.Object
	for _, name := range scope.Names() { // sorted
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj.(type) {
		case *types.Const:
			consts = append(consts, obj)
		case *types.Var:
			vars = append(vars, obj)
		case *types.Func:
			funcs = append(funcs, obj)
		case *types.TypeName:
			typs = append(typs, obj)
		}
	}
	for _, obj := range consts {
		c := obj.(*types.Const)
		if basic, ok := c.Type().(*types.Basic); ok && basic.Info()&types.IsUntyped != 0 {
			fmt.Fprintf(b, "const %s = %s\n", c.Name(), c.Val().ExactString())
		} else {
			fmt.Fprintf(b, "const %s %s = %s%s\n", c.Name(), ts(c.Type()), c.Val().ExactString(), durationNote(c))
		}
	}
	for _, obj := range vars {
		fmt.Fprintf(b, "var %s %s\n", obj.Name(), ts(obj.Type()))
	}
	for _, obj := range funcs {
		fmt.Fprintf(b, "func %s%s\n", obj.Name(), signature(obj.Type().(*types.Signature), qual))
	}
	for _, obj := range typs {
		writeType(b, obj.(*types.TypeName), qual)
	}
}

// durationNote is " // 1.5s" for a constant of type time.Duration, whose
// value alone, in nanoseconds, is hard to read.
func durationNote(c *types.Const) string {
	n, ok := types.Unalias(c.Type()).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "time" || n.Obj().Name() != "Duration" {
		return ""
	}
	ns, exact := constant.Int64Val(c.Val())
	if !exact {
		return ""
	}
	return " // " + time.Duration(ns).String()
}

func signature(sig *types.Signature, qual types.Qualifier) string {
	var buf bytes.Buffer
	types.WriteSignature(&buf, sig, qual)
	return buf.String()
}

func writeType(b *strings.Builder, tn *types.TypeName, qual types.Qualifier) {
	ts := func(t types.Type) string { return types.TypeString(t, qual) }
	if tn.IsAlias() {
		fmt.Fprintf(b, "type %s = %s\n", tn.Name(), ts(types.Unalias(tn.Type())))
		return
	}
	named, ok := tn.Type().(*types.Named)
	if !ok {
		fmt.Fprintf(b, "type %s %s\n", tn.Name(), ts(tn.Type()))
		return
	}
	name := tn.Name()
	if tp := named.TypeParams(); tp.Len() > 0 {
		var params []string
		for i := range tp.Len() {
			params = append(params, tp.At(i).Obj().Name()+" "+ts(tp.At(i).Constraint()))
		}
		name += "[" + strings.Join(params, ", ") + "]"
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		fmt.Fprintf(b, "type %s struct\n", name)
		hidden := false
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case !f.Exported():
				hidden = true
			case f.Embedded():
				fmt.Fprintf(b, "    embedded %s\n", ts(f.Type()))
			default:
				fmt.Fprintf(b, "    %s %s\n", f.Name(), ts(f.Type()))
			}
		}
		if hidden {
			b.WriteString("    // unexported fields\n")
		}
	case *types.Interface:
		fmt.Fprintf(b, "type %s interface\n", name)
		for i := range u.NumEmbeddeds() {
			fmt.Fprintf(b, "    embedded %s\n", ts(u.EmbeddedType(i)))
		}
		hidden := false
		for i := range u.NumExplicitMethods() {
			m := u.ExplicitMethod(i)
			if !m.Exported() {
				hidden = true
				continue
			}
			fmt.Fprintf(b, "    %s%s\n", m.Name(), signature(m.Type().(*types.Signature), qual))
		}
		if hidden {
			b.WriteString("    // unexported methods: cannot be implemented outside the package\n")
		}
	default:
		fmt.Fprintf(b, "type %s %s\n", name, ts(u))
	}
	var methods []*types.Func
	for i := range named.NumMethods() {
		if m := named.Method(i); m.Exported() {
			methods = append(methods, m)
		}
	}
	slices.SortFunc(methods, func(a, b *types.Func) int { return strings.Compare(a.Name(), b.Name()) })
	for _, m := range methods {
		sig := m.Type().(*types.Signature)
		recv := ts(sig.Recv().Type())
		fmt.Fprintf(b, "    func (%s) %s%s\n", recv, m.Name(), signature(sig, qual))
	}
}

// Markers around a generated API block in the changelog.
func beginMarker(modPath string) string {
	return "<!-- api " + modPath + ": generated by `bash .ci/api --changelog`; do not edit -->"
}
func endMarker(modPath string) string { return "<!-- end api " + modPath + " -->" }

// errNoUnreleased means the changelog's newest release section is released
// already: its API lists are history, and nothing may regenerate them.
var errNoUnreleased = errors.New(`no unreleased section: add a heading "## vX.Y.Z (unreleased)" above the released ones`)

// changelogSection locates the newest release section of a changelog, the
// lines from the first "## v" heading up to the next "## " heading, and
// returns the version its heading names and its line range. The section must
// be unreleased (its heading says so); otherwise the error is errNoUnreleased.
func changelogSection(lines []string) (version string, start, end int, err error) {
	start = -1
	for i, l := range lines {
		if start < 0 {
			if strings.HasPrefix(l, "## v") {
				if !strings.Contains(l, "(unreleased)") {
					return "", 0, 0, errNoUnreleased
				}
				start = i
				version = strings.Fields(l)[1]
			}
			continue
		}
		if strings.HasPrefix(l, "## ") {
			return version, start, i, nil
		}
	}
	if start < 0 {
		return "", 0, 0, errNoUnreleased
	}
	return version, start, len(lines), nil
}

// rewriteChangelog replaces, in the unreleased section of the changelog text,
// the generated API block of each module with apis[i] (released sections are
// history and stay as they are). A module without a block in that section
// gets a new subsection at its end.
func rewriteChangelog(text string, mods []*Module, apis []string) (string, error) {
	lines := strings.Split(text, "\n")
	version, start, end, err := changelogSection(lines)
	if err != nil {
		return "", err
	}
	section := slices.Clone(lines[start:end])
	for i, m := range mods {
		block := append([]string{beginMarker(m.Path), "```text"}, strings.Split(strings.TrimSuffix(apis[i], "\n"), "\n")...)
		block = append(block, "```", endMarker(m.Path))
		b := slices.Index(section, beginMarker(m.Path))
		e := slices.Index(section, endMarker(m.Path))
		switch {
		case b >= 0 && e > b:
			section = slices.Concat(section[:b], block, section[e+1:])
		case b >= 0 || e >= 0:
			return "", fmt.Errorf("changelog: unmatched API markers for %s in the %s section", m.Path, version)
		default:
			tail := len(section)
			for tail > 0 && strings.TrimSpace(section[tail-1]) == "" {
				tail--
			}
			add := slices.Concat([]string{"", fmt.Sprintf("### %s (tag %s)", m.Path, m.Tag(version)), "", "API:", ""}, block)
			if tail == len(section) {
				add = append(add, "") // a blank line before the next heading
			}
			section = slices.Concat(section[:tail], add, section[tail:])
		}
	}
	return strings.Join(slices.Concat(lines[:start], section, lines[end:]), "\n"), nil
}

// changelogAPI regenerates (write) or checks (!write) the API blocks of the
// published modules in the changelog file.
func changelogAPI(root string, mods []*Module, file string, write bool) error {
	pub := published(mods)
	apis := make([]string, len(pub))
	for i, m := range pub {
		am, err := loadModule(filepath.Join(root, filepath.FromSlash(m.Dir)), m.Path)
		if err != nil {
			return err
		}
		apis[i] = apiSummary(am)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, err := rewriteChangelog(string(data), pub, apis)
	if errors.Is(err, errNoUnreleased) && !write {
		fmt.Printf("%s: no unreleased section, no API list to check\n", file)
		return nil
	}
	if err != nil {
		return err
	}
	if out == string(data) {
		if !write {
			fmt.Printf("%s: API lists up to date\n", file)
		}
		return nil
	}
	if !write {
		return fmt.Errorf("%s: the API summaries are out of date; run: bash .ci/api --changelog", file)
	}
	return os.WriteFile(file, []byte(out), 0o644)
}
