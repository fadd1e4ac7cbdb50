package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
)

// previousTag returns the highest version that m has been tagged with in the
// repository at root ("" when none), as the version without m's tag prefix.
func previousTag(root string, m *Module) (string, error) {
	prefix := strings.TrimSuffix(m.Tag("v"), "v")
	cmd := exec.Command("git", "tag", "--list", prefix+"v*")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git tag --list in %s: %w", root, err)
	}
	best := ""
	for _, tag := range strings.Fields(string(out)) {
		v := strings.TrimPrefix(tag, prefix)
		if strings.Contains(v, "/") || !semver.IsValid(v) || semver.Canonical(v) != v {
			continue
		}
		if best == "" || semver.Compare(v, best) > 0 {
			best = v
		}
	}
	return best, nil
}

// bumpKind is the smallest kind of version change an API difference needs.
type bumpKind int

const (
	bumpPatch bumpKind = iota // no API change
	bumpMinor                 // compatible additions
	bumpMajor                 // incompatible changes
)

func (k bumpKind) String() string {
	return [...]string{"patch", "minor", "major"}[k]
}

func kindOf(r apidiff.Report) bumpKind {
	k := bumpPatch
	for _, c := range r.Changes {
		if !c.Compatible {
			return bumpMajor
		}
		k = bumpMinor
	}
	return k
}

// minNext is the lowest version that may follow prev after a change of kind
// k. Below v1 an incompatible change needs a new minor version (semver's
// "anything may change" is narrowed to minor versions here); from v1 on it
// needs a new major version, that is a new module path, so it is refused.
func minNext(prev string, k bumpKind) (string, error) {
	if semver.Prerelease(prev) != "" {
		// The API of a pre-release is not promised; its release may differ.
		return strings.TrimSuffix(prev, semver.Prerelease(prev)), nil
	}
	var major, minor, patch int
	if _, err := fmt.Sscanf(prev, "v%d.%d.%d", &major, &minor, &patch); err != nil {
		return "", fmt.Errorf("version %s: %w", prev, err)
	}
	switch {
	case k == bumpMajor && major >= 1:
		return "", fmt.Errorf("incompatible API changes after %s: a v%d module must stay compatible (a breaking change needs a new major version with a /v%d module path)", prev, major, major+1)
	case k == bumpMajor || k == bumpMinor:
		return fmt.Sprintf("v%d.%d.0", major, minor+1), nil
	default:
		return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1), nil
	}
}

// compat compares the API of each published module with its previous tag
// and prints the differences (or, for a module never tagged, the API of the
// release candidate). It fails when a change is not allowed: always for an
// incompatible change after v1, and when next is set (a release) for a
// version lower than the change needs.
func compat(w io.Writer, root string, mods []*Module, next string) error {
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		fmt.Fprintln(w, "warning: shallow clone, tags may be missing (actions/checkout needs fetch-depth: 0)")
	}
	trees := map[string]string{} // tag -> extracted tree
	defer func() {
		for _, d := range trees {
			os.RemoveAll(d)
		}
	}()
	var errs []error
	for _, m := range published(mods) {
		cur, err := loadModule(filepath.Join(root, filepath.FromSlash(m.Dir)), m.Path)
		if err != nil {
			return err
		}
		prev, err := previousTag(root, m)
		if err != nil {
			return err
		}
		if prev == "" {
			fmt.Fprintf(w, "\n%s: no previous tag (%s); API of the release candidate:\n%s", m.Path, m.Tag("v*"), apiSummary(cur))
			continue
		}
		tag := m.Tag(prev)
		tree, ok := trees[tag]
		if !ok {
			if tree, err = extractTag(root, tag); err != nil {
				return err
			}
			trees[tag] = tree
		}
		old, err := loadModule(filepath.Join(tree, filepath.FromSlash(m.Dir)), m.Path)
		if err != nil {
			return fmt.Errorf("%s at %s: %w", m.Path, tag, err)
		}
		report := apidiff.ModuleChanges(old, cur)
		k := kindOf(report)
		fmt.Fprintf(w, "\n%s: %s since %s\n", m.Path, [...]string{"no API change", "compatible API changes", "INCOMPATIBLE API changes"}[k], tag)
		if err := report.Text(w); err != nil {
			return err
		}
		need, err := minNext(prev, k)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Path, err))
			continue
		}
		fmt.Fprintf(w, "the next release of %s must be %s or higher\n", m.Path, need)
		if next != "" && semver.Compare(next, need) < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is too low after %s with %s-level API changes: use %s or higher", m.Path, next, prev, k, need))
		}
	}
	return errors.Join(errs...)
}

// extractTag writes the tree of tag into a new temporary directory.
func extractTag(root, tag string) (string, error) {
	dir, err := os.MkdirTemp("", "releasetool-"+strings.ReplaceAll(tag, "/", "-")+"-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("git", "archive", "--format=tar", tag)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if err := untar(out, dir); err != nil {
		cmd.Wait()
		return "", fmt.Errorf("git archive %s: %w", tag, err)
	}
	return dir, cmd.Wait()
}

// untar writes the regular files and directories of a tar stream below dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
