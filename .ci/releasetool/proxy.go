package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// writeProxy fills dir, in the layout of a module proxy (GOPROXY=file://dir),
// with every published module of the working tree at version v and with every
// module version of their dependency graphs, copied from the module cache.
// A proxy built this way answers a consumer's go get with GOPROXY=file://dir,off
// exactly as the public proxy would after the tags are pushed.
//
// With tags (for gorelease), it also holds every version the published modules
// are tagged with in git, and lists only those: gorelease takes the listed
// versions as the released ones (the base to compare with, and the versions
// that already exist), while a sibling required at v still resolves. A module
// already tagged v keeps its tag's content.
func writeProxy(root string, mods []*Module, v, dir string, tags bool) error {
	if err := checkReleaseVersion(v); err != nil {
		return err
	}
	ours := siblings(mods)
	deps := map[module.Version]bool{}
	for _, m := range published(mods) {
		mdir := filepath.Join(root, filepath.FromSlash(m.Dir))
		var tagged []string
		if tags {
			var err error
			if tagged, err = addTags(root, m, dir); err != nil {
				return err
			}
		}
		if !slices.Contains(tagged, v) {
			if err := addModuleZip(root, m, v, dir, !tags); err != nil {
				return err
			}
		}
		// The zips of what the module builds with, then the whole graph.
		if _, err := goCmd(mdir, "mod", "download"); err != nil {
			return err
		}
		out, err := goCmd(mdir, "mod", "graph")
		if err != nil {
			return err
		}
		for _, mv := range graphVersions(out) {
			if _, isOurs := ours[mv.Path]; !isOurs {
				deps[mv] = true
			}
		}
	}
	cache, err := goCmd(root, "env", "GOMODCACHE")
	if err != nil {
		return err
	}
	from := filepath.Join(strings.TrimSpace(string(cache)), "cache", "download")
	for mv := range deps {
		if err := copyFromCache(from, dir, mv); err != nil {
			return err
		}
	}
	return nil
}

// graphVersions returns the module versions named in the output of go mod
// graph, without the main module and the go and toolchain pseudo-modules.
func graphVersions(graph []byte) []module.Version {
	seen := map[module.Version]bool{}
	var out []module.Version
	for _, field := range strings.Fields(string(graph)) {
		p, v, ok := strings.Cut(field, "@")
		if !ok || p == "go" || p == "toolchain" {
			continue
		}
		mv := module.Version{Path: p, Version: v}
		if !seen[mv] {
			seen[mv] = true
			out = append(out, mv)
		}
	}
	return out
}

// addTags writes every version m is tagged with in the git repository at
// root into the proxy directory dir, listed, and returns those versions.
func addTags(root string, m *Module, dir string) ([]string, error) {
	prefix := strings.TrimSuffix(m.Tag("v"), "v")
	out, err := exec.Command("git", "-C", root, "tag", "--list", prefix+"v*").Output()
	if err != nil {
		return nil, fmt.Errorf("git tag --list in %s: %w", root, err)
	}
	var versions []string
	for _, tag := range strings.Fields(string(out)) {
		v := strings.TrimPrefix(tag, prefix)
		if strings.Contains(v, "/") || !semver.IsValid(v) || semver.Canonical(v) != v {
			continue
		}
		subdir := ""
		if m.Dir != "." {
			subdir = m.Dir
		}
		var zip bytes.Buffer
		if err := modzip.CreateFromVCS(&zip, module.Version{Path: m.Path, Version: v}, root, tag, subdir); err != nil {
			return nil, fmt.Errorf("%s: %w", tag, err)
		}
		gomod, err := exec.Command("git", "-C", root, "show", tag+":"+path.Join(subdir, "go.mod")).Output()
		if err != nil {
			return nil, fmt.Errorf("git show %s: %w", tag, err)
		}
		if err := writeVersion(dir, m.Path, v, zip.Bytes(), gomod, true); err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	return versions, nil
}

// addModuleZip writes m's go.mod, zip and info at version v into the proxy
// directory dir, listed if list is set. The zip holds the files git would
// commit (tracked or untracked, not ignored), without the directories of
// nested modules; it is checked as the go command checks a downloaded zip.
func addModuleZip(root string, m *Module, v, dir string, list bool) error {
	mv := module.Version{Path: m.Path, Version: v}
	mdir := filepath.Join(root, filepath.FromSlash(m.Dir))
	files, err := moduleFiles(root, m.Dir)
	if err != nil {
		return err
	}
	var zip bytes.Buffer
	if files == nil {
		err = modzip.CreateFromDir(&zip, mv, mdir) // not a git checkout
	} else {
		err = modzip.Create(&zip, mv, files)
	}
	if err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(mdir, "go.mod"))
	if err != nil {
		return err
	}
	return writeVersion(dir, m.Path, v, zip.Bytes(), gomod, list)
}

// writeVersion writes the zip, go.mod and info of module p at version v into
// the proxy directory dir, checking the zip as the go command checks a
// downloaded one, and adds v to the module's list if list is set.
func writeVersion(dir, p, v string, zip, gomod []byte, list bool) error {
	vdir, err := versionDir(dir, p)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(v)
	if err != nil {
		return err
	}
	zipPath := filepath.Join(vdir, ev+".zip")
	if err := os.WriteFile(zipPath, zip, 0o644); err != nil {
		return err
	}
	if _, err := modzip.CheckZip(module.Version{Path: p, Version: v}, zipPath); err != nil {
		return fmt.Errorf("%s: %w", zipPath, err)
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct{ Version, Time string }{v, time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".info"), info, 0o644); err != nil {
		return err
	}
	return addToList(vdir, v, list)
}

// versionDir creates and returns the @v directory of module path p in the
// proxy directory dir.
func versionDir(dir, p string) (string, error) {
	ep, err := module.EscapePath(p)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(ep), "@v")
	return vdir, os.MkdirAll(vdir, 0o755)
}

// addToList adds v to the list file in vdir (if add is set; the file is
// created either way), keeping it sorted by semver.
func addToList(vdir, v string, add bool) error {
	list := filepath.Join(vdir, "list")
	data, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if add && !slices.Contains(versions, v) {
		versions = append(versions, v)
	}
	semver.Sort(versions)
	text := strings.Join(versions, "\n")
	if text != "" {
		text += "\n"
	}
	return os.WriteFile(list, []byte(text), 0o644)
}

// diskFile is a file of the working tree, named by its path in the module.
type diskFile struct{ rel, abs string }

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// moduleFiles lists the files under dir (relative to root) that git would
// commit: tracked files still present and untracked files not ignored. It
// returns nil, nil when root is not a git checkout.
func moduleFiles(root, dir string) ([]modzip.File, error) {
	if _, err := exec.Command("git", "-C", root, "rev-parse", "--git-dir").Output(); err != nil {
		return nil, nil
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	files := []modzip.File{}
	for _, p := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if p == "" {
			continue
		}
		abs := filepath.Join(root, filepath.FromSlash(p))
		if _, err := os.Lstat(abs); errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		files = append(files, diskFile{rel: strings.TrimPrefix(p, prefix), abs: abs})
	}
	return files, nil
}

// copyFromCache copies mv's .mod, .zip and .info from the module cache's
// download directory (itself in proxy layout) into the proxy directory dir.
// A version whose .mod is not cached is skipped: go mod graph also names the
// requirements of pruned modules, which the go command never loads. The zip
// is there only for modules whose packages are built; a missing .info is
// written (the version is all it must hold).
func copyFromCache(cache, dir string, mv module.Version) error {
	ep, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	src := filepath.Join(cache, filepath.FromSlash(ep), "@v", ev)
	if _, err := os.Stat(src + ".mod"); errors.Is(err, os.ErrNotExist) {
		return nil // named in a pruned part of the graph, never loaded
	}
	dst, err := versionDir(dir, mv.Path)
	if err != nil {
		return err
	}
	for _, ext := range []string{".mod", ".zip", ".info"} {
		data, err := os.ReadFile(src + ext)
		switch {
		case errors.Is(err, os.ErrNotExist) && ext == ".zip":
			continue
		case errors.Is(err, os.ErrNotExist) && ext == ".info":
			data, err = json.Marshal(struct{ Version string }{mv.Version})
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, ev+ext), data, 0o644); err != nil {
			return err
		}
	}
	if module.IsPseudoVersion(mv.Version) {
		return nil // a list names tagged versions only
	}
	return addToList(dst, mv.Version, true)
}

// goCmd runs the go command in dir, outside any workspace, and returns its
// standard output; an error carries its standard error.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return out, nil
}
