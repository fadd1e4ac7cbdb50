package promcollector_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/addrlimit/addrlimit/promcollector"
	"github.com/prometheus/client_golang/prometheus"
)

// The alerting rules, their promtool tests and the Grafana dashboard that
// ship in alerts/.
const (
	rulesFile     = "alerts/addrlimit.rules.yml"
	rulesTestFile = "alerts/addrlimit.rules.test.yml"
	dashboardFile = "alerts/dashboard.json"
)

// TestAlertRules runs promtool (Debian package prometheus) on the rules:
// their syntax, and their unit tests, where each alert fires and where it
// stays quiet. Without promtool it skips, except under CI=true.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found: install it (Debian/Ubuntu: apt-get install -y --no-install-recommends prometheus)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI requires the alerting rules' tests")
		}
		t.Skip(msg)
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(rulesFile)},
		{"test", "rules", filepath.Base(rulesTestFile)},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// exported returns the names of the metric families the collector exports.
func exported(t *testing.T) []string {
	t.Helper()
	lim := newLimiter(t)
	traffic(t, lim)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(lim, "public"), promcollector.New(identityTraffic(t), "named"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names
}

var metricName = regexp.MustCompile(`\baddrlimit_[a-z0-9_]+`)

// TestAlertsUseExportedMetrics: every metric name in the rules, their tests
// and the dashboard (the whole text of each file, comments included) is one
// the collector exports, so a renamed metric fails here instead of leaving a
// silent alert or an empty panel; and the dashboard shows every exported
// metric.
func TestAlertsUseExportedMetrics(t *testing.T) {
	names := exported(t)
	if len(names) != 13 {
		t.Fatalf("the collector exports %d metric families (%v); this test expects the 13 docs/observability.md lists", len(names), names)
	}
	for _, file := range []string{rulesFile, rulesTestFile, dashboardFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, m := range metricName.FindAllString(string(b), -1) {
			used[m] = true
			if !slices.Contains(names, m) {
				t.Errorf("%s uses %s, which the collector does not export (it exports %v)", file, m, names)
			}
		}
		if len(used) == 0 {
			t.Errorf("%s names no addrlimit metric", file)
		}
		if file == dashboardFile {
			for _, n := range names {
				if !used[n] {
					t.Errorf("the dashboard does not show %s", n)
				}
			}
		}
	}
}

// TestDashboardIsGrafanaJSON: the dashboard parses, has a uid and a title,
// and every panel queries the dashboard's data source variable with at least
// one PromQL expression.
func TestDashboardIsGrafanaJSON(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title string
		Panels     []struct {
			Title      string
			Datasource struct{ UID string }
			Targets    []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid, title or panels: %+v", d)
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries; want ${datasource} and at least one", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if !metricName.MatchString(q.Expr) || !strings.Contains(q.Expr, `limiter=~"$limiter"`) {
				t.Errorf("panel %q: query %q names no addrlimit metric or ignores the limiter variable", p.Title, q.Expr)
			}
		}
	}
}
