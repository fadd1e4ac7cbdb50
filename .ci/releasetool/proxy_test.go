package main

import (
	"archive/zip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// git runs git in dir with a fixed identity and fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main", "-c", "tag.gpgSign=false", "-c", "commit.gpgSign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestModuleZip(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":         rootMod,
		"lib.go":         "package lib\n",
		".gitignore":     "*.out\n",
		"trace.out":      "ignored by git, so not in the zip\n",
		"gone.go":        "package lib\n",
		"store/go.mod":   "module example.com/lib/store\n",
		"store/store.go": "package store\n",
		"doc/notes.md":   "tracked, in a plain directory\n",
	})
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	if err := os.Remove(filepath.Join(root, "gone.go")); err != nil { // tracked, deleted in the working tree
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "new.go"), []byte("package lib\n"), 0o644); err != nil { // untracked
		t.Fatal(err)
	}
	mods := mustFind(t, root)
	proxy := t.TempDir()
	for _, m := range mods {
		if err := addModuleZip(root, m, "v0.3.0", proxy, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path  string
		files []string
	}{
		{"example.com/lib", []string{".gitignore", "doc/notes.md", "go.mod", "lib.go", "new.go"}},
		{"example.com/lib/store", []string{"go.mod", "store.go"}},
	} {
		zipFile := filepath.Join(proxy, filepath.FromSlash(tc.path), "@v", "v0.3.0.zip")
		mv := module.Version{Path: tc.path, Version: "v0.3.0"}
		if _, err := modzip.CheckZip(mv, zipFile); err != nil {
			t.Errorf("%s: CheckZip: %v", tc.path, err)
		}
		zr, err := zip.OpenReader(zipFile)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range zr.File {
			got = append(got, strings.TrimPrefix(f.Name, tc.path+"@v0.3.0/"))
		}
		zr.Close()
		slices.Sort(got)
		if !slices.Equal(got, tc.files) {
			t.Errorf("%s zip holds %q, want %q", tc.path, got, tc.files)
		}
		for _, name := range []string{"list", "v0.3.0.mod", "v0.3.0.info"} {
			if _, err := os.Stat(filepath.Join(proxy, filepath.FromSlash(tc.path), "@v", name)); err != nil {
				t.Errorf("%s: %v", tc.path, err)
			}
		}
	}
	if err := addModuleZip(root, mods[0], "v0.2.0", proxy, true); err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(proxy, "example.com", "lib", "@v", "list"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(list), "v0.2.0\nv0.3.0\n"; got != want {
		t.Errorf("list = %q, want %q", got, want)
	}
}

func TestGraphVersions(t *testing.T) {
	graph := "example.com/lib example.com/dep@v1.0.0\nexample.com/lib go@1.26.0\nexample.com/dep@v1.0.0 example.com/leaf@v0.1.0\nexample.com/dep@v1.0.0 toolchain@go1.26.8\nexample.com/lib example.com/leaf@v0.1.0\n"
	got := graphVersions([]byte(graph))
	want := []module.Version{{Path: "example.com/dep", Version: "v1.0.0"}, {Path: "example.com/leaf", Version: "v0.1.0"}}
	if !slices.Equal(got, want) {
		t.Errorf("graphVersions = %v, want %v", got, want)
	}
}

func TestCopyFromCache(t *testing.T) {
	cache := writeTree(t, map[string]string{
		"github.com/!burnt!sushi/toml/@v/v1.0.0.mod":                    "module github.com/BurntSushi/toml\n",
		"github.com/!burnt!sushi/toml/@v/v1.0.0.zip":                    "zip bytes",
		"example.com/modonly/@v/v0.0.0-20200101000000-abcdefabcdef.mod": "module example.com/modonly\n",
	})
	proxy := t.TempDir()
	for _, mv := range []module.Version{
		{Path: "github.com/BurntSushi/toml", Version: "v1.0.0"},
		{Path: "example.com/modonly", Version: "v0.0.0-20200101000000-abcdefabcdef"},
		{Path: "example.com/pruned", Version: "v1.0.0"}, // .mod not cached: skipped
	} {
		if err := copyFromCache(cache, proxy, mv); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"github.com/!burnt!sushi/toml/@v/v1.0.0.zip":                    "zip bytes",
		"github.com/!burnt!sushi/toml/@v/v1.0.0.info":                   `{"Version":"v1.0.0"}`,
		"github.com/!burnt!sushi/toml/@v/list":                          "v1.0.0\n",
		"example.com/modonly/@v/v0.0.0-20200101000000-abcdefabcdef.mod": "module example.com/modonly\n",
	} {
		got, err := os.ReadFile(filepath.Join(proxy, filepath.FromSlash(name)))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"example.com/modonly/@v/list", "example.com/modonly/@v/v0.0.0-20200101000000-abcdefabcdef.zip", "example.com/pruned"} {
		if _, err := os.Stat(filepath.Join(proxy, filepath.FromSlash(name))); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v), want it absent", name, err)
		}
	}
}

// With -tags the proxy holds what gorelease needs: the tagged versions
// (listed, with the tag's content) as the released ones, and the working tree
// at the release version (unlisted, so not taken for a released version).
func TestProxyWithTags(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":         rootMod,
		"lib.go":         "package lib\n\nfunc A() {}\n",
		"store/go.mod":   "module example.com/lib/store\n\ngo 1.26.0\n\nrequire example.com/lib v0.1.0\n\nreplace example.com/lib => ../\n",
		"store/store.go": "package store\n",
	})
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "v0.1.0")
	git(t, root, "tag", "v0.1.0")
	git(t, root, "tag", "store/not-a-version")
	if err := os.WriteFile(filepath.Join(root, "lib.go"), []byte("package lib\n\nfunc B() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := writeProxy(root, mustFind(t, root), "v0.2.0", proxy, true); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(proxy, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got, want := read("example.com/lib/@v/list"), "v0.1.0\n"; got != want {
		t.Errorf("root list = %q, want %q", got, want)
	}
	if got := read("example.com/lib/store/@v/list"); got != "" {
		t.Errorf("store list = %q, want empty (never tagged)", got)
	}
	for v, want := range map[string]string{"v0.1.0": "func A()", "v0.2.0": "func B()"} {
		zr, err := zip.OpenReader(filepath.Join(proxy, "example.com", "lib", "@v", v+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "/lib.go") {
				rc, _ := f.Open()
				var b strings.Builder
				io.Copy(&b, rc)
				rc.Close()
				if !strings.Contains(b.String(), want) {
					t.Errorf("%s lib.go = %q, want %q", v, b.String(), want)
				}
			}
		}
		zr.Close()
	}
}
