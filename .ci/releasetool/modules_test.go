package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (slash-separated path -> content) below a new
// temporary directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func mustFind(t *testing.T, root string) []*Module {
	t.Helper()
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

const rootMod = "module example.com/lib\n\ngo 1.26.0\n"

func TestIsPublished(t *testing.T) {
	for dir, want := range map[string]bool{
		".":                true,
		"redisstore":       true,
		"otelcollector":    true,
		"contrib/x":        true,
		"benchmarks":       false,
		"examples/chi":     false,
		".ci/releasetool":  false,
		"_tools":           false,
		"store/testdata/m": false,
	} {
		if got := isPublished(dir, true); got != want {
			t.Errorf("isPublished(%q, true) = %v, want %v", dir, got, want)
		}
	}
	if isPublished("proxytest", false) {
		t.Error("a module with nothing to import is published")
	}
}

// A module is published only if it has a package users can import: tests,
// commands, internal packages and the packages of nested modules do not count.
func TestFindModulesPublishesOnlyImportableModules(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":                   rootMod,
		"lib.go":                   "package lib\n",
		"store/go.mod":             "module example.com/lib/store\n",
		"store/store.go":           "package store\n",
		"e2e/go.mod":               "module example.com/lib/e2e\n",
		"e2e/e2e_test.go":          "package e2e\n",
		"e2e/internal/h/h.go":      "package h\n",
		"e2e/cmd/run/main.go":      "package main\n",
		"e2e/testdata/x.go":        "package x\n",
		"e2e/nested/go.mod":        "module example.com/lib/e2e/nested\n",
		"e2e/nested/n.go":          "package nested\n",
		"examples/gin/go.mod":      "module example.com/lib/examples/gin\n",
		"examples/gin/handlers.go": "package handlers\n",
	})
	var got []string
	for _, m := range mustFind(t, root) {
		if m.Published {
			got = append(got, m.Dir)
		}
	}
	if want := ". e2e/nested store"; strings.Join(got, " ") != want {
		t.Errorf("published %q, want %q", got, want)
	}
}

func TestFindModulesOrder(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":            rootMod,
		"b/go.mod":          "module example.com/lib/b\n",
		"a/go.mod":          "module example.com/lib/a\n",
		".git/x/go.mod":     "module ignored\n",
		"examples/e/go.mod": "module example.com/lib/examples/e\n",
	})
	var got []string
	for _, m := range mustFind(t, root) {
		got = append(got, m.Dir)
	}
	if want := ". a b examples/e"; strings.Join(got, " ") != want {
		t.Errorf("modules %q, want %q", got, want)
	}
}

func TestDeclaredVersion(t *testing.T) {
	nested := func(dir, require, replace string) string {
		s := "module example.com/lib/" + dir + "\n\ngo 1.26.0\n\nrequire " + require + "\n"
		if replace != "" {
			s += "\nreplace " + replace + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string // version, or "" when an error is expected
		errPart string
	}{
		{
			name: "real version and replace",
			files: map[string]string{
				"go.mod":            rootMod,
				"store/go.mod":      nested("store", "example.com/lib v0.1.0", "example.com/lib => ../"),
				"examples/x/go.mod": "module example.com/lib/examples/x\n\nrequire (\n\texample.com/lib v0.1.0 // indirect\n\texample.com/lib/store v0.1.0\n)\n\nreplace (\n\texample.com/lib => ../../\n\texample.com/lib/store => ../../store\n\tgithub.com/other/peer => ../../../peer\n)\n",
			},
			want: "v0.1.0",
		},
		{
			name: "placeholder",
			files: map[string]string{
				"go.mod":       rootMod,
				"store/go.mod": nested("store", "example.com/lib v0.0.0", "example.com/lib => ../"),
			},
			errPart: "placeholder",
		},
		{
			name: "no replace",
			files: map[string]string{
				"go.mod":       rootMod,
				"store/go.mod": nested("store", "example.com/lib v0.1.0", ""),
			},
			errPart: "without replace example.com/lib => ../",
		},
		{
			name: "replace to the wrong directory",
			files: map[string]string{
				"go.mod":       rootMod,
				"store/go.mod": nested("store", "example.com/lib v0.1.0", "example.com/lib => ./"),
			},
			errPart: "must be => ../",
		},
		{
			name: "different versions",
			files: map[string]string{
				"go.mod":   rootMod,
				"a/go.mod": nested("a", "example.com/lib v0.1.0", "example.com/lib => ../"),
				"b/go.mod": nested("b", "example.com/lib v0.2.0", "example.com/lib => ../"),
			},
			errPart: "different versions",
		},
		{
			name: "published module replaces a third party",
			files: map[string]string{
				"go.mod":       rootMod + "\nreplace github.com/other/peer => ../peer\n",
				"store/go.mod": nested("store", "example.com/lib v0.1.0", "example.com/lib => ../"),
			},
			errPart: "may replace only its siblings",
		},
		{
			name: "nested module path does not match its directory",
			files: map[string]string{
				"go.mod":       rootMod,
				"store/go.mod": "module example.com/lib/redis\n\nrequire example.com/lib v0.1.0\n\nreplace example.com/lib => ../\n",
				"store/s.go":   "package redis\n",
			},
			errPart: "must be example.com/lib/store",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := declaredVersion(mustFind(t, writeTree(t, tc.files)))
			if tc.errPart == "" {
				if err != nil || got != tc.want {
					t.Fatalf("declaredVersion = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Fatalf("declaredVersion = %q, %v; want an error containing %q", got, err, tc.errPart)
			}
		})
	}
}

func TestBump(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":            rootMod,
		"store/go.mod":      "module example.com/lib/store\n\ngo 1.26.0\n\nrequire (\n\texample.com/lib v0.0.0\n\tgithub.com/other/dep v1.2.3\n)\n\nreplace example.com/lib => ../\n",
		"metrics/go.mod":    "module example.com/lib/metrics\n\ngo 1.26.0\n\nrequire example.com/lib v0.0.0 // the core\n",
		"examples/x/go.mod": "module example.com/lib/examples/x\n\ngo 1.26.0\n\nrequire example.com/lib/store v0.0.0\n\nrequire example.com/lib v0.0.0 // indirect\n",
	})
	for _, bad := range []string{"v0.0.0", "0.2.0", "v0.2", "v2.0.0", "v0.2.0+meta"} {
		if _, err := bump(root, mustFind(t, root), bad); err == nil {
			t.Errorf("bump(%q) succeeded, want an error", bad)
		}
	}
	changed, err := bump(root, mustFind(t, root), "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(changed, " "), "examples/x metrics store"; got != want {
		t.Errorf("changed %q, want %q", got, want)
	}
	mods := mustFind(t, root)
	if v, err := declaredVersion(mods); err != nil || v != "v0.2.0" {
		t.Fatalf("after bump: declaredVersion = %q, %v", v, err)
	}
	data, err := os.ReadFile(filepath.Join(root, "metrics", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"example.com/lib v0.2.0 // the core", "replace example.com/lib => ../"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("metrics/go.mod lacks %q:\n%s", want, data)
		}
	}
	data, err = os.ReadFile(filepath.Join(root, "store", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "github.com/other/dep v1.2.3") {
		t.Errorf("bump changed a third-party requirement:\n%s", data)
	}
	if changed, err := bump(root, mods, "v0.2.0"); err != nil || len(changed) != 0 {
		t.Errorf("second bump to the same version changed %q, %v; want nothing", changed, err)
	}
}
