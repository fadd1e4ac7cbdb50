package grpclimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/addrlimit/addrlimit"
)

// TestLogObserverLogsTheFullMethodAsRoute checks what the package doc and
// docs/grpc.md promise: a limited call's LogObserver line carries the full method
// as its route attribute (and no path attribute).
func TestLogObserverLogsTheFullMethodAsRoute(t *testing.T) {
	var buf bytes.Buffer
	lo, err := addrlimit.NewLogObserver(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := newLimiter(t, 1, time.Hour, addrlimit.WithObserver(lo.Observe))
	c := serve(t, lim, nil)
	_, err = check(c, context.Background())
	wantCode(t, err, codes.OK, "call of the budget")
	_, err = check(c, context.Background())
	wantCode(t, err, codes.ResourceExhausted, "call over the budget")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1 (the limited call):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], " route=/grpc.health.v1.Health/Check ") {
		t.Errorf("line %q, want route=/grpc.health.v1.Health/Check", lines[0])
	}
	if strings.Contains(lines[0], " path=") {
		t.Errorf("line %q has a path attribute; the method is logged as route", lines[0])
	}
}
