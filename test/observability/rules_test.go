package observability

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// promtool checks rules.yaml's groups (syntax, templates, duplicate
// names) and runs rules_test.yaml against them; every alert has a unit
// test there.
func TestAlertRules(t *testing.T) {
	promtool := systest.PinnedTool(t, "Makefile", "promtool", "test")
	spec, groups := readRules(t)
	tests := promFile(t, "rules_test.yaml")
	// promtool reads rule groups, and the unit tests' rule_files beside
	// them: the PrometheusRule's spec and a copy of the tests, together.
	dir := t.TempDir()
	for name, b := range map[string][]byte{"rules.groups.yaml": spec, "rules_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.groups.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		stdout, stderr, err := systest.Run(dir, nil, 2*time.Minute, promtool, args...)
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), stdout)
	}

	// Each alert fires in a case of the tests and stays quiet in another.
	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &unit); err != nil {
		t.Fatalf("rules_test.yaml: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range unit.Tests {
		for _, e := range tc.AlertRuleTest {
			if len(e.ExpAlerts) > 0 {
				fires[e.Alertname] = true
			} else {
				quiet[e.Alertname] = true
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && (!fires[r.Alert] || !quiet[r.Alert]) {
				t.Errorf("rules_test.yaml: %s fires in a case: %t; stays quiet in one: %t; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}
