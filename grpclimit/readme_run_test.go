package grpclimit_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// recipeBlock returns the one Go block of the repository's Markdown
// (README.md, docs/*.md) that is a program containing every one of marks.
func recipeBlock(t *testing.T, marks ...string) string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range append([]string{filepath.Join("..", "README.md")}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
	blocks:
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			for _, mark := range append(marks, "package main\n", "func main() {") {
				if !strings.Contains(m[1], mark) {
					continue blocks
				}
			}
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d programs in the docs contain %q, want 1", len(found), marks)
	}
	return found[0]
}

// The README's gRPC server and client, as pasted: the server listens on
// ADDR, the client's public call passes, its internal call without the
// token is refused Unauthenticated and with the token served. Without
// INTERNAL_TOKEN the server stops with NewInternalToken's error.
func TestReadmeGRPCRecipeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs: not in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for name, src := range map[string]string{
		"go.mod":         "module readmerecipe\n\ngo 1.26.0\n",
		"go.work":        "go 1.26.0\n\nuse (\n\t.\n\t" + here + "\n\t" + filepath.Dir(here) + "\n)\n",
		"server/main.go": recipeBlock(t, "grpclimit.WithInternalMethods"),
		"client/main.go": recipeBlock(t, "NewChannelzClient", `"authorization"`),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, prog := range []string{"server", "client"} {
		build := exec.Command(goBin, "build", "-o", filepath.Join(work, "bin", prog), "./"+prog)
		build.Dir = work
		build.Env = append(os.Environ(), "GOWORK="+filepath.Join(work, "go.work"), "GOFLAGS=-mod=readonly")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build the README's %s: %v\n%s", prog, err, out)
		}
	}

	out, err := exec.Command(filepath.Join(work, "bin", "server")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "addrlimit: internal token secret 1 of 1 is empty") {
		t.Fatalf("server without INTERNAL_TOKEN: %v, %q; want it to stop with NewInternalToken's error", err, out)
	}

	env := []string{"INTERNAL_TOKEN=" + secret}
	server := exec.Command(filepath.Join(work, "bin", "server"))
	server.Env = append(os.Environ(), append(env, "ADDR=127.0.0.1:0")...)
	stderr, err := server.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	lines := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && lines.Scan() {
		if _, a, ok := strings.Cut(lines.Text(), "serving gRPC on "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("the server stopped before it served: %v", lines.Err())
	}
	client := exec.Command(filepath.Join(work, "bin", "client"))
	client.Env = append(os.Environ(), append(env, "ADDR="+addr)...)
	got, err := client.CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, got)
	}
	want := "public: OK\ninternal without the token: Unauthenticated\ninternal with the token: OK\n"
	if string(got) != want {
		t.Fatalf("client printed\n%s\nwant\n%s", got, want)
	}
}
