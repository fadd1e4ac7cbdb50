package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// incidentLog is the traffic of examples/incident as an nginx log (the
// combined format plus a verified identity field, "-" for none): a busy
// minute of internal calls from the shared egress address 127.0.0.1, sent
// within one second as the demo sends them (edge 420, orchestrator 260,
// gate 180, interleaved), then a public script of 400 requests from
// 127.0.0.2 and 400 requests with a forged token from 127.0.0.3.
func incidentLog() string {
	var b strings.Builder
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	line := func(at time.Time, addr, method, path, ua, identity string) {
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" 200 2 \"-\" \"%s\" \"%s\"\n", addr, at.Format("02/Jan/2006:15:04:05 -0700"), method, path, ua, identity)
	}
	calls := []struct {
		identity, method, path, ua string
		n                          int
	}{
		{"edge", "GET", "/internal/domains/lookup", "edge/2.3 (custom-domain lookup)", 420},
		{"orchestrator", "PUT", "/internal/agents/42/progress", "orchestrator/1.9", 260},
		{"gate", "GET", "/internal/previews/7/access", "preview-gate/0.4", 180},
	}
	for i := 0; ; i++ {
		sent := false
		for _, c := range calls {
			if i < c.n {
				line(t0, "127.0.0.1", c.method, c.path, c.ua, c.identity)
				sent = true
			}
		}
		if !sent {
			break
		}
	}
	for range 400 {
		line(t0.Add(2*time.Second), "127.0.0.2", "GET", "/v1/sites", "python-requests/2.32", "-")
	}
	for range 400 {
		line(t0.Add(3*time.Second), "127.0.0.3", "PUT", "/internal/agents/42/progress", "curl/8.5", "-")
	}
	return b.String()
}

func replayJSON(t *testing.T, log string, args ...string) *Report {
	t.Helper()
	var out bytes.Buffer
	if err := run(append(args, "-json"), strings.NewReader(log), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func keyOf(t *testing.T, r *Report, key string) Key {
	t.Helper()
	for _, k := range r.Keys {
		if k.Key == key {
			return k
		}
	}
	t.Fatalf("key %s not in the report", key)
	return Key{}
}

// TestIncidentReplayed: the demo's traffic, replayed as the limit of the
// incident (300 per minute per address). Without the exemption the replay
// names the shared egress address (three user agents), with the demo's
// figures: 300 of its 860 calls allowed, 560 refused, first refusal at the
// first second. With the identities exempt, the egress address is gone and
// the report lists the three services; the script and the forged token are
// limited exactly as before (300 allowed, 100 refused each).
func TestIncidentReplayed(t *testing.T) {
	log := incidentLog()
	args := []string{"-limit", "300", "-per", "1m", "-identity-field", "1"}

	before := replayJSON(t, log, append(args, "-exempt-identities=false")...)
	egress := keyOf(t, before, "127.0.0.1")
	if egress.Requests != 860 || egress.Refused != 560 || !egress.SharedEgress || egress.UserAgents != 3 || egress.Paths != 3 {
		t.Errorf("egress before the fix: %+v; want 860 requests, 560 refused, shared egress with 3 user agents and 3 paths", egress)
	}
	if want := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC); egress.FirstRefusal == nil || !egress.FirstRefusal.Equal(want) {
		t.Errorf("first refusal %v, want %v", egress.FirstRefusal, want)
	}
	if egress.PeakPerSec != 860 || egress.PeakPerMin != 860 {
		t.Errorf("egress peaks %d/s, %d/min; want 860 and 860", egress.PeakPerSec, egress.PeakPerMin)
	}
	if before.Keys[0].Key != "127.0.0.1" {
		t.Errorf("first key of the report: %s, want the egress (most refused)", before.Keys[0].Key)
	}

	after := replayJSON(t, log, args...)
	if after.Exempt != 860 || after.WithIdentity != 860 || after.Refused != 200 {
		t.Errorf("after the fix: exempt %d, with identity %d, refused %d; want 860, 860, 200", after.Exempt, after.WithIdentity, after.Refused)
	}
	for _, k := range after.Keys {
		if k.Key == "127.0.0.1" {
			t.Errorf("the egress address is still charged: %+v", k)
		}
	}
	ids := fmt.Sprint(after.Identities)
	if want := "[{edge 420 420 0} {orchestrator 260 260 0} {gate 180 180 0}]"; ids != want {
		t.Errorf("identities %s, want %s", ids, want)
	}
	for _, r := range []*Report{before, after} {
		for _, addr := range []string{"127.0.0.2", "127.0.0.3"} {
			if k := keyOf(t, r, addr); k.Requests != 400 || k.Refused != 100 || k.SharedEgress {
				t.Errorf("%s: %+v; want 400 requests, 100 refused, not shared", addr, k)
			}
		}
	}

	// The terminal summary and the HTML report say the same.
	var text bytes.Buffer
	page := filepath.Join(t.TempDir(), "r.html")
	if err := run(append(args, "-exempt-identities=false", "-html", page), strings.NewReader(log), &text, io.Discard); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: two inline charts, no script, nothing fetched.
	if n := bytes.Count(html, []byte("<svg ")); n != 2 {
		t.Errorf("the HTML report has %d charts, want 2", n)
	}
	// The replay's internal token is its own random secret: no output shows it.
	for _, out := range [][]byte{text.Bytes(), html} {
		if bytes.Contains(out, []byte("Bearer")) {
			t.Errorf("an output shows a bearer token:\n%s", out)
		}
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import", "url("} {
		if bytes.Contains(html, []byte(bad)) {
			t.Errorf("the HTML report contains %q: it must load nothing", bad)
		}
	}
	for _, want := range []string{`<td class="k">127.0.0.1</td>`, "shared egress?", `class="refused"`, "edge/2.3 (custom-domain lookup)"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	// docs/observability.md shows this summary, word for word.
	readme, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "$ addrlimit-replay -limit 300 -per 1m -identity-field 1 -exempt-identities=false incident.log\n"
	_, shown, ok := strings.Cut(string(readme), prompt)
	shown, _, _ = strings.Cut(shown, "```")
	if !ok || shown != text.String() {
		t.Errorf("docs/observability.md shows after %q:\n%s\nthe command prints:\n%s", prompt, shown, text.String())
	}
	if name := os.Getenv("REPLAY_HTML"); name != "" { // to look at it: REPLAY_HTML=/tmp/r.html go test -run Incident
		if err := run(append(args, "-exempt-identities=false", "-html", name), strings.NewReader(log), io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
}
