package observability

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// promFile reads a file of config/prometheus, tracked as an input of the
// test's result.
func promFile(t *testing.T, name string) []byte {
	t.Helper()
	path := filepath.Join(kubetest.RepoRoot(t), "config", "prometheus", name)
	kubetest.TrackFiles(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ruleGroups is rules.yaml's PrometheusRule spec: the rule groups, as
// promtool reads them.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert"`
			Record string `json:"record"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// readRules returns the spec of rules.yaml, as YAML and decoded.
func readRules(t *testing.T) ([]byte, ruleGroups) {
	t.Helper()
	b := promFile(t, "rules.yaml")
	var rule struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	if rule.Kind != "PrometheusRule" {
		t.Fatalf("rules.yaml holds a %q, want a PrometheusRule", rule.Kind)
	}
	var groups ruleGroups
	if err := json.Unmarshal(rule.Spec, &groups); err != nil {
		t.Fatalf("rules.yaml spec: %v", err)
	}
	spec, err := yaml.JSONToYAML(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, groups
}

// panelQuery is one query of the dashboard, named for messages.
type panelQuery struct{ panel, expr string }

// dashboardQueries returns every query of dashboard.json's panels.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b := promFile(t, "dashboard.json")
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"` // a collapsed row's
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var out []panelQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, q := range p.Targets {
				out = append(out, panelQuery{p.Title, q.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var (
	// What names no metric: quoted strings, label matchers, ranges and
	// the label lists of by, without, on, ignoring, group_left and
	// group_right.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// A word: a name (a function or aggregation is followed by its
	// parenthesis), or a number or duration (it starts with a digit).
	promqlWord     = regexp.MustCompile(`[a-zA-Z0-9_:.]+(\s*\()?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames returns the metric names a PromQL expression selects.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlLabels.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promqlWord.FindAllStringSubmatch(s, -1) {
		word := strings.TrimSpace(strings.TrimSuffix(m[0], m[1]))
		if m[1] != "" || word[0] == '.' || (word[0] >= '0' && word[0] <= '9') || slices.Contains(promqlKeywords, strings.ToLower(word)) {
			continue
		}
		names = append(names, word)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (namespace, policy) (rate(sluice_decisions_total{result=~"denied|x"}[$__rate_interval]))`: {"sluice_decisions_total"},
		`histogram_quantile(0.99, sum by (le) (rate(sluice_check_duration_seconds_bucket[5m])))`:          {"sluice_check_duration_seconds_bucket"},
		"a_total / b_count > 0.5":                           {"a_total", "b_count"},
		"a < on (job) group_left () max by (job) (a)":       {"a", "a"},
		`sum(rate(x{c="y"}[10m])) - sum (rate(z[10m])) > 0`: {"x", "z"},
		"up offset 5m and bool 1e3":                         {"up"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}
