package main

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Module is one go.mod file of the repository.
type Module struct {
	Dir       string // slash-separated, relative to the repository root; "." for the root module
	Path      string // the module path its go.mod declares
	Published bool   // tagged and installable by users (see isPublished)
	File      *modfile.File
}

// Tag is the git tag that publishes m at version v: the version itself for
// the root module, prefixed with the module's directory for a nested one, as
// the go command requires.
func (m *Module) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// isPublished reports whether the module in dir (slash-separated, relative
// to the repository root) is tagged and offered to users, decided from the
// tree alone so that a new module needs no list to be edited. Not published:
//   - modules under benchmarks/ and examples/: they exist to be run from a
//     clone, and their requirements on the peers they compare with must not
//     reach anyone's build;
//   - modules in directories the go command itself ignores (a name starting
//     with "." or "_", testdata), such as this tool;
//   - modules with nothing to import (lib false): only tests, commands or
//     internal packages, such as a module that tests the others.
func isPublished(dir string, lib bool) bool {
	if dir == "." {
		return true
	}
	parts := strings.Split(dir, "/")
	for _, p := range parts {
		if ignoredDir(p) {
			return false
		}
	}
	return lib && parts[0] != "benchmarks" && parts[0] != "examples"
}

// ignoredDir reports whether the go command ignores a directory of this name.
func ignoredDir(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata"
}

// hasLibrary reports whether the module in dir has a package users can
// import: a non-test Go file of a package other than main, outside internal
// directories and the directories of nested modules.
func hasLibrary(dir string) (bool, error) {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			_, err := os.Stat(filepath.Join(p, "go.mod"))
			if p != dir && (ignoredDir(d.Name()) || d.Name() == "internal" || err == nil) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		if f.Name.Name != "main" {
			return found
		}
		return nil
	})
	if err == found {
		return true, nil
	}
	return false, err
}

// findModules returns every module under root, the root module first and the
// others sorted by directory. It never reads inside .git.
func findModules(root string) ([]*Module, error) {
	var mods []*Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module directive", p)
		}
		lib, err := hasLibrary(filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		mods = append(mods, &Module{Dir: dir, Path: f.Module.Mod.Path, Published: isPublished(dir, lib), File: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	key := func(m *Module) string { // "" for the root module, which comes first
		if m.Dir == "." {
			return ""
		}
		return m.Dir
	}
	slices.SortFunc(mods, func(a, b *Module) int { return strings.Compare(key(a), key(b)) })
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("%s has no go.mod: not the repository root", root)
	}
	return mods, nil
}

// published returns the published modules of mods, in order.
func published(mods []*Module) []*Module {
	var out []*Module
	for _, m := range mods {
		if m.Published {
			out = append(out, m)
		}
	}
	return out
}

// siblings maps the module path of every module of the repository to it.
func siblings(mods []*Module) map[string]*Module {
	by := make(map[string]*Module, len(mods))
	for _, m := range mods {
		by[m.Path] = m
	}
	return by
}

// replaceDir is the directory a replace directive in m's go.mod must name for
// the sibling s: s's directory relative to m's, with the "./" or "../" prefix
// the go command requires of a directory.
func replaceDir(m, s *Module) string {
	rel, err := filepath.Rel(filepath.FromSlash(m.Dir), filepath.FromSlash(s.Dir))
	if err != nil { // both are relative to the repository root, so this cannot happen
		panic(err)
	}
	rel = filepath.ToSlash(rel)
	switch {
	case strings.Trim(rel, "./") == "": // "..", "../..": written "../", "../../"
		return rel + "/"
	case !strings.HasPrefix(rel, "../"):
		return "./" + rel
	}
	return rel
}

// declaredVersion checks how the modules of the repository refer to one
// another and returns the version they declare, the version a release of
// this tree carries. The rules, each needed for a user's go get to work:
//   - a published nested module's path is the root module's path plus its directory;
//   - every requirement of a sibling module (direct or indirect) names the same
//     version, a real release version (v0.0.0 is a placeholder no tag will carry);
//   - every module that requires a sibling replaces it with the sibling's
//     directory, so development never needs the tag (users ignore the replace);
//   - a published module replaces nothing else: its users would not see that
//     replacement and would build something different.
func declaredVersion(mods []*Module) (string, error) {
	root := mods[0]
	by := siblings(mods)
	var errs []error
	versions := map[string][]string{} // version -> "dir requires path"
	for _, m := range mods {
		if m.Published && m.Dir != "." && m.Path != root.Path+"/"+m.Dir {
			errs = append(errs, fmt.Errorf("%s/go.mod: module path %s must be %s/%s, or its tags (%s) would not resolve", m.Dir, m.Path, root.Path, m.Dir, m.Tag("vX.Y.Z")))
		}
		replaced := map[string]string{}
		for _, r := range m.File.Replace {
			if s, ok := by[r.Old.Path]; ok && r.Old.Version == "" {
				replaced[r.Old.Path] = r.New.Path
				if r.New.Version != "" || path.Clean(path.Join(m.Dir, r.New.Path)) != s.Dir {
					errs = append(errs, fmt.Errorf("%s/go.mod: replace %s => %s %s: must be => %s", m.Dir, r.Old.Path, r.New.Path, r.New.Version, replaceDir(m, s)))
				}
				continue
			}
			if m.Published {
				errs = append(errs, fmt.Errorf("%s/go.mod: replace %s: a published module may replace only its siblings; users of %s would not see this replacement", m.Dir, r.Old, m.Path))
			}
		}
		for _, r := range m.File.Require {
			s, ok := by[r.Mod.Path]
			if !ok {
				continue
			}
			versions[r.Mod.Version] = append(versions[r.Mod.Version], m.Dir+" requires "+r.Mod.Path)
			if _, ok := replaced[r.Mod.Path]; !ok {
				errs = append(errs, fmt.Errorf("%s/go.mod: requires %s %s without replace %s => %s: development would need that tag", m.Dir, r.Mod.Path, r.Mod.Version, r.Mod.Path, replaceDir(m, s)))
			}
		}
	}
	var v string
	switch len(versions) {
	case 0:
		errs = append(errs, errors.New("no module requires a sibling module: nothing declares the release version"))
	case 1:
		for k := range versions {
			v = k
		}
		switch {
		case v == "v0.0.0":
			errs = append(errs, fmt.Errorf("sibling requirements name v0.0.0, a placeholder that no tag will carry: a user's go get of a nested module would fail with %s@v0.0.0: not found. Run: bash .ci/release vX.Y.Z", root.Path))
		case !semver.IsValid(v) || semver.Canonical(v) != v:
			errs = append(errs, fmt.Errorf("sibling requirements name %s, not a canonical semantic version", v))
		case semver.Build(v) != "":
			errs = append(errs, fmt.Errorf("sibling requirements name %s: build metadata is not allowed in module versions", v))
		}
	default:
		var lines []string
		for k, who := range versions {
			lines = append(lines, fmt.Sprintf("  %s: %s", k, strings.Join(who, ", ")))
		}
		slices.Sort(lines)
		errs = append(errs, fmt.Errorf("sibling requirements name different versions (modules are released together, at one version):\n%s", strings.Join(lines, "\n")))
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return v, nil
}

// bump sets every requirement of a sibling module to v and makes sure each is
// replaced by the sibling's directory, then writes the changed go.mod files.
// It returns the directories of the modules it changed.
func bump(root string, mods []*Module, v string) ([]string, error) {
	if err := checkReleaseVersion(v); err != nil {
		return nil, err
	}
	by := siblings(mods)
	var changed []string
	for _, m := range mods {
		before, err := m.File.Format()
		if err != nil {
			return nil, err
		}
		var sibs []*Module
		for _, r := range m.File.Require {
			if s, ok := by[r.Mod.Path]; ok {
				sibs = append(sibs, s)
			}
		}
		for _, s := range sibs {
			if err := m.File.AddRequire(s.Path, v); err != nil {
				return nil, err
			}
			if err := m.File.AddReplace(s.Path, "", replaceDir(m, s), ""); err != nil {
				return nil, err
			}
		}
		m.File.Cleanup()
		after, err := m.File.Format()
		if err != nil {
			return nil, err
		}
		if string(after) == string(before) {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), after, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, m.Dir)
	}
	return changed, nil
}

// checkReleaseVersion reports whether v can be the version of a release.
func checkReleaseVersion(v string) error {
	switch {
	case !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "":
		return fmt.Errorf("%q is not a release version: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE", v)
	case v == "v0.0.0":
		return errors.New("v0.0.0 is not a release version")
	case semver.Major(v) != "v0" && semver.Major(v) != "v1":
		return fmt.Errorf("%s needs a /%s suffix on every module path (semantic import versioning); this tool does not do that move", v, semver.Major(v))
	}
	return nil
}
