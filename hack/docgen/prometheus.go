package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The Grafana dashboard and alert rules page is made from the files that
// ship (config/prometheus, which the Helm chart links): each row and panel
// of the dashboard with the exact queries behind it, and each alert rule
// with its expression, so the page cannot drift from what is installed.

const (
	dashboardFile = "config/prometheus/dashboard.json"
	rulesFile     = "config/prometheus/rules.yaml"
)

// dashboard is the part of a Grafana dashboard's JSON the page shows.
type dashboard struct {
	Title       string  `json:"title"`
	UID         string  `json:"uid"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"`
	Templating  struct {
		List []struct {
			Name  string `json:"name"`
			Label string `json:"label"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// panel is a dashboard panel, or a row (whose panels, when it is
// collapsed, are nested in it; otherwise they follow it).
type panel struct {
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"`
	Targets     []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		RefID        string `json:"refId"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Mappings []struct {
				Type    string `json:"type"`
				Options map[string]struct {
					Text string `json:"text"`
				} `json:"options"`
			} `json:"mappings"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// ruleFile is a PrometheusRule's groups of rules.
type ruleFile struct {
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// prometheusPages is docs/reference/grafana-dashboard.md.
func prometheusPages(root string) ([]page, error) {
	var dash dashboard
	raw, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardFile, err)
	}
	var rules ruleFile
	raw, err = os.ReadFile(filepath.Join(root, rulesFile))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		return nil, fmt.Errorf("%s: %w", rulesFile, err)
	}
	d := newDoc("`" + dashboardFile + "` and `" + rulesFile + "`")
	d.p("# Grafana dashboard panels and alert rules")
	d.p("The Grafana dashboard and the Prometheus alert rules Sluice ships in `config/prometheus` (the Helm chart's `grafanaDashboard` and `prometheusRule` values install the same files): every panel with the queries behind it, and every alert with its expression. How to install them: [Grafana dashboard and alerts](../operations/observability.md).")
	if err := dashboardSection(d, &dash); err != nil {
		return nil, err
	}
	if err := rulesSection(d, &rules); err != nil {
		return nil, err
	}
	return []page{{"docs/reference/grafana-dashboard.md", d.Bytes()}}, nil
}

// dashboardSection writes the dashboard's variables, then a section per
// row with a heading per panel.
func dashboardSection(d *doc, dash *dashboard) error {
	d.p("## The dashboard")
	d.p("*%s* (uid `%s`): %s", dash.Title, dash.UID, text(dash.Description))
	var vars []string
	for _, v := range dash.Templating.List {
		kind := "a " + v.Type + " variable"
		if v.Type == "datasource" {
			kind = "a data source"
		}
		vars = append(vars, fmt.Sprintf("`$%s` (labeled %s; %s of type %s)", v.Name, v.Label, kind, code(v.Query)))
	}
	if len(vars) > 0 {
		d.p("Variables, chosen at the top of the dashboard: %s. The queries run on that data source; `$__rate_interval` is Grafana's own, a rate window of at least four scrape intervals.", strings.Join(vars, ", "))
	}
	if len(dash.Panels) == 0 {
		return fmt.Errorf("%s: no panels", dashboardFile)
	}
	if dash.Panels[0].Type != "row" {
		d.p("### Panels")
	}
	for _, p := range dash.Panels {
		if p.Type != "row" {
			if err := panelSection(d, &p); err != nil {
				return err
			}
			continue
		}
		d.p("### Row: %s", p.Title)
		for _, q := range p.Panels {
			if err := panelSection(d, &q); err != nil {
				return err
			}
		}
	}
	return nil
}

// panelSection writes one panel: its title, type, unit and value
// mappings, description, and each query with its legend.
func panelSection(d *doc, p *panel) error {
	if len(p.Targets) == 0 {
		return fmt.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
	}
	d.p("#### %s", p.Title)
	about := []string{"*" + p.Type + "*"}
	if u := unitName(p.FieldConfig.Defaults.Unit); u != "" {
		about = append(about, u)
	}
	for _, m := range p.FieldConfig.Defaults.Mappings {
		if m.Type != "value" {
			continue
		}
		values := make([]string, 0, len(m.Options))
		for v := range m.Options {
			values = append(values, v)
		}
		slices.SortFunc(values, compareNumbers)
		shown := make([]string, len(values))
		for i, v := range values {
			shown[i] = code(v) + " " + m.Options[v].Text
		}
		about = append(about, "values "+strings.Join(shown, ", "))
	}
	d.p("%s. %s", strings.Join(about, ", "), text(p.Description))
	for _, t := range p.Targets {
		legend := t.RefID
		if t.LegendFormat != "" {
			legend = code(t.LegendFormat)
		}
		d.p("Query %s, legend %s:", t.RefID, legend)
		d.p("```promql\n%s\n```", strings.TrimSpace(t.Expr))
	}
	return nil
}

// unitName says a Grafana unit in words.
func unitName(unit string) string {
	switch unit {
	case "", "none":
		return ""
	case "ops":
		return "per second"
	case "s":
		return "in seconds"
	}
	return "unit " + code(unit)
}

// compareNumbers orders numeric strings by value, others after them.
func compareNumbers(a, b string) int {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	switch {
	case errA == nil && errB == nil && x != y:
		if x < y {
			return -1
		}
		return 1
	case errA == nil && errB != nil:
		return -1
	case errA != nil && errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// rulesSection writes the alert rules as a table (name, severity, for,
// expression, summary), then each one's description and runbook.
func rulesSection(d *doc, rules *ruleFile) error {
	d.p("## Alerts")
	d.p("The `PrometheusRule` `sluice`, for the Prometheus Operator. `{{ $labels.pod }}` and `{{ $value }}` are filled in when an alert fires.")
	n := 0
	for _, g := range rules.Spec.Groups {
		var rows [][]string
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			rows = append(rows, []string{
				fmt.Sprintf("[%s](#%s)", code(r.Alert), anchor(r.Alert)), r.Labels["severity"], r.For,
				code(strings.Join(strings.Fields(r.Expr), " ")), text(r.Annotations["summary"]),
			})
		}
		if len(rows) == 0 {
			continue
		}
		d.p("Group `%s`:", g.Name)
		d.table([]string{"alert", "severity", "for", "expression", "summary"}, "", rows)
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			d.p("### %s", r.Alert)
			d.p("%s", text(strings.TrimSpace(r.Annotations["description"])))
			d.p("**What to do.** %s", text(strings.Join(strings.Fields(r.Annotations["runbook"]), " ")))
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: no alert rules", rulesFile)
	}
	return nil
}
