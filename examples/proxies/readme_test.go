package proxies_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// proxySection returns docs/proxies.md, the page of the proxy
// configurations.
func proxySection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "proxies.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// trimmedLines returns the lines of s without surrounding white space,
// blank ones dropped, joined by newlines.
func trimmedLines(s string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

var fence = regexp.MustCompile("(?s)```(nginx|haproxy|caddy)\n(.*?)```")

// Every proxy configuration docs/proxies.md quotes is in a file the tests run.
func TestREADMEQuotesTestedConfigs(t *testing.T) {
	section := proxySection(t)
	files, err := filepath.Glob(filepath.Join("configs", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs: %v", err)
	}
	var configs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, trimmedLines(string(b)))
	}
	blocks := fence.FindAllStringSubmatch(section, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/proxies.md quotes no proxy configuration")
	}
	for _, b := range blocks {
		q := trimmedLines(b[2])
		if !slices.ContainsFunc(configs, func(c string) bool { return strings.Contains(c, q) }) {
			t.Errorf("docs/proxies.md quotes a %s configuration that no file in configs/ contains:\n%s", b[1], b[2])
		}
	}
	// Every config file linked exists, and every one is linked.
	for _, f := range files {
		if !strings.Contains(section, "(../examples/proxies/"+filepath.ToSlash(f)+")") {
			t.Errorf("%s is not linked from docs/proxies.md", f)
		}
	}
	for _, m := range regexp.MustCompile(`\(\.\./examples/proxies/([^)]+)\)`).FindAllStringSubmatch(section, -1) {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("docs/proxies.md links %s: %v", m[1], err)
		}
	}
}

// Every test docs/proxies.md names exists, and every test of a
// configuration is named there.
func TestREADMENamesEveryTest(t *testing.T) {
	section := proxySection(t)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9]+)`").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	files, _ := filepath.Glob("*_test.go")
	defined := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9]+)\(t \*testing\.T\)`).FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
	}
	for name := range named {
		if !defined[name] {
			t.Errorf("docs/proxies.md names %s, which does not exist", name)
		}
	}
	for name := range defined {
		if !named[name] && !strings.HasPrefix(name, "TestREADME") {
			t.Errorf("%s is not named in docs/proxies.md", name)
		}
	}
}
