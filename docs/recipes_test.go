package docs_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The recipes of the docs (every page: README.md, docs/*.md, …) run as pasted: each
// server program (the README's quick start for net/http, its ":8080" the
// one thing changed) is built against the module of the repository that
// requires its framework, started on a free loopback port (ADDR), and
// driven as a client would. Every HTTP recipe answers 401 on internal
// paths, routed or not, without the token, charges each such request to
// the address first (its budget of 300 ends in 429), limits the public
// routes with the same budget, and exempts the token even then. The gRPC
// server is driven by the README's own client. Without INTERNAL_TOKEN each
// server stops with NewInternalToken's error.
func TestRecipesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the recipes' programs: not in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root := repoRoot(t)
	blocks := docsPrograms(t, root)
	for _, r := range []struct {
		name, mark, module string // mark: an import of the server, unique to it
	}{
		{"net/http", "http.FileServer(", "."}, // the README's quick start
		{"gin", `"github.com/gin-gonic/gin"`, "examples/gin"},
		{"echo", `"github.com/labstack/echo/v4"`, "examples/echo"},
		{"gorilla/mux", `"github.com/gorilla/mux"`, "examples/gorilla"},
		{"chi", `"github.com/go-chi/chi/v5"`, "examples/chi"},
		{"gRPC", `"github.com/addrlimit/addrlimit/grpclimit"`, "grpclimit"},
	} {
		t.Run(r.name, func(t *testing.T) {
			var server string
			if r.name == "net/http" {
				// The quick start listens on :8080 as a newcomer's would; here
				// on a free loopback port, its one change.
				const listen = `http.ListenAndServe(":8080", `
				server = only(t, blocks, r.mark, "func main() {", listen, `os.Getenv("INTERNAL_TOKEN")`)
				server = strings.Replace(server, listen, `http.ListenAndServe(os.Getenv("ADDR"), `, 1)
			} else {
				server = only(t, blocks, r.mark, "func main() {", `os.Getenv("ADDR")`, `os.Getenv("INTERNAL_TOKEN")`)
			}
			progs := map[string]string{"server": server}
			if r.name == "gRPC" {
				progs["client"] = only(t, blocks, "grpc.NewClient(", `os.Getenv("ADDR")`, `"authorization"`)
			}
			bin := buildPrograms(t, goBin, root, filepath.Join(root, r.module), progs)

			out, err := exec.Command(bin["server"]).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "addrlimit: internal token secret 1 of 1 is empty") {
				t.Fatalf("without INTERNAL_TOKEN: %v, %q; want it to stop with NewInternalToken's error", err, out)
			}
			const secret = "recipe-internal-secret-0123456789"
			addr := startServer(t, bin["server"], "INTERNAL_TOKEN="+secret)
			if r.name == "gRPC" {
				client := exec.Command(bin["client"])
				client.Env = append(os.Environ(), "ADDR="+addr, "INTERNAL_TOKEN="+secret)
				got, err := client.CombinedOutput()
				if want := "public: OK\ninternal without the token: Unauthenticated\ninternal with the token: OK\n"; err != nil || string(got) != want {
					t.Fatalf("the docs' gRPC client: %v, printed\n%s\nwant\n%s", err, got, want)
				}
				return
			}
			driveHTTPRecipe(t, "http://"+addr, secret)
		})
	}
}

// driveHTTPRecipe checks the promise of an HTTP recipe at base, whose
// budget is 300 a minute per address, from one address.
func driveHTTPRecipe(t *testing.T, base, secret string) {
	const internal, burst, refill = "/internal/agents/7/progress", 300, time.Minute / 300
	// A redirect is an answer of the server's: never followed here.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, authorization string) *http.Response {
		t.Helper()
		r, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if authorization != "" {
			r.Header.Set("Authorization", authorization)
		}
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	exempt := func(when string) {
		t.Helper()
		for range 3 {
			if c := do(http.MethodPut, internal, "Bearer "+secret).StatusCode; c == http.StatusUnauthorized || c == http.StatusTooManyRequests {
				t.Fatalf("%s, with the token: %d, want the route's own answer", when, c)
			}
		}
	}
	exempt("before any other request")

	start := time.Now()
	charged := 0
	for _, c := range []struct{ method, path, authorization string }{
		{http.MethodGet, "/internal/no-such-route", ""},
		{http.MethodPut, internal, ""},
		{http.MethodPut, internal + "/", ""}, // a router's trailing-slash redirect would skip the limiter
		{http.MethodPut, internal, "Basic " + secret},
	} {
		if got := do(c.method, c.path, c.authorization).StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("%s %s with %q: %d, want 401", c.method, c.path, c.authorization, got)
		}
		charged++
	}
	for {
		got := do(http.MethodPut, internal, "Bearer forged-secret-0123456789abcdef").StatusCode
		if got == http.StatusTooManyRequests {
			break
		}
		if got != http.StatusUnauthorized {
			t.Fatalf("forged token: %d, want 401 until the budget is spent, then 429", got)
		}
		if charged++; charged > 10*burst {
			t.Fatalf("%d requests without the token were never limited", charged)
		}
	}
	// The bucket refills one token every 200 ms while the requests run.
	if most := burst + int(time.Since(start)/refill) + 1; charged < burst || charged > most {
		t.Fatalf("%d requests without the token answered 401 before the first 429, want %d to %d", charged, burst, most)
	}
	if resp := do(http.MethodGet, "/sites", ""); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a public route once the address's budget is spent: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	exempt("once the address's budget is spent")
}

var docsGoBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// docsPrograms returns the Go programs (package main) of every page.
func docsPrograms(t *testing.T, root string) []string {
	t.Helper()
	var progs []string
	for _, p := range pages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docsGoBlock.FindAllStringSubmatch(string(b), -1) {
			if strings.HasPrefix(m[1], "package main\n") {
				progs = append(progs, m[1])
			}
		}
	}
	return progs
}

// only returns the one program that contains every one of marks.
func only(t *testing.T, progs []string, marks ...string) string {
	t.Helper()
	var found []string
next:
	for _, p := range progs {
		for _, m := range marks {
			if !strings.Contains(p, m) {
				continue next
			}
		}
		found = append(found, p)
	}
	if len(found) != 1 {
		t.Fatalf("%d programs in the docs contain all of %q, want 1", len(found), marks)
	}
	return found[0]
}

// buildPrograms builds each program (name → source) in a module of its own,
// in a workspace with the root module and module, which requires the
// third-party modules it imports; it returns the binaries by name.
func buildPrograms(t *testing.T, goBin, root, module string, progs map[string]string) map[string]string {
	t.Helper()
	work := t.TempDir()
	use := "\t.\n\t" + root + "\n"
	if module != root {
		use += "\t" + module + "\n"
	}
	files := map[string]string{
		"go.mod":  "module readme.recipes\n\ngo 1.26.0\n",
		"go.work": "go 1.26.0\n\nuse (\n" + use + ")\n",
	}
	for name, src := range progs {
		files[filepath.Join(name, "main.go")] = src
	}
	for name, src := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bins := map[string]string{}
	for name := range progs {
		bins[name] = filepath.Join(work, "bin", name)
		build := exec.Command(goBin, "build", "-o", bins[name], "./"+name)
		build.Dir = work
		build.Env = append(os.Environ(), "GOWORK="+filepath.Join(work, "go.work"), "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build the docs' %s: %v\n%s", name, err, out)
		}
	}
	return bins
}

// startServer runs bin with env and ADDR set to a free loopback port until
// the test ends, and returns that address once it accepts connections.
func startServer(t *testing.T, bin string, env ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), env...), "ADDR="+addr)
	var logged bytes.Buffer // read once Wait returned
	cmd.Stdout, cmd.Stderr = &logged, &logged
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the server stopped before it listened on %s: %v\n%s", addr, err, logged.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
