package addrlimit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// maxDocLines bounds what a user of the middleware reads: `go doc -all` of
// the root package. Store authors read package store's page instead.
const maxDocLines = 600

// TestRootDocFitsItsBound checks the bound (the page was 1,250 lines when
// it held the store interfaces and repeated facts across comments).
func TestRootDocFitsItsBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go doc")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(goTool, "doc", "-all", ".").Output()
	if err != nil {
		t.Skipf("go doc: %v", err)
	}
	if n := strings.Count(string(out), "\n"); n > maxDocLines {
		t.Errorf("go doc -all . prints %d lines, more than %d: move store-facing text to package store, or say each fact once", n, maxDocLines)
	}
}
