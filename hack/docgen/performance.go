package main

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

//go:embed templates/performance.md
var performanceTemplate string

// performancePages are docs/performance.md and its plots under
// docs/img/bench.
func performancePages(root string) ([]page, error) {
	files, err := readBenchFiles(root)
	if err != nil {
		return nil, err
	}
	var pages []page
	parts := map[string]string{}
	for _, part := range []struct {
		key, prefix, title string
		plots              func(*benchSection) ([]page, string, error)
	}{
		{"HTTP", "HTTP check endpoint", "The HTTP check endpoint", httpPlots},
		{"RLS", "Envoy Rate Limit Service", "Envoy's rate limit service (gRPC)", rlsPlots},
		{"Memory", "Memory under a flood", "Memory under a flood of distinct keys", nil},
	} {
		f, s := newestSection(files, part.prefix)
		if s == nil {
			return nil, fmt.Errorf("no bench/*.md has a section %q", part.prefix)
		}
		text := fmt.Sprintf("## %s\n\nFrom `%s` (%s). %s\n\n", part.title, f.path, f.at.Format("2006-01-02 15:04 MST"), f.machine)
		if part.plots != nil {
			ps, md, err := part.plots(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.path, err)
			}
			pages = append(pages, ps...)
			text += md
		}
		parts[part.key] = text + s.body()
	}
	var hist strings.Builder
	for _, f := range files {
		titles := make([]string, len(f.sections))
		for i, s := range f.sections {
			titles[i] = s.title
		}
		fmt.Fprintf(&hist, "- `%s` (%s): %s\n", f.path, f.at.Format("2006-01-02 15:04 MST"), strings.Join(titles, "; "))
	}
	parts["History"] = strings.TrimSpace(hist.String())
	t, err := template.New("performance").Parse(performanceTemplate)
	if err != nil {
		return nil, err
	}
	d := newDoc("`hack/docgen/templates/performance.md` and the newest `bench/*.md` results")
	if err := t.Execute(d, parts); err != nil {
		return nil, err
	}
	return append(pages, page{"docs/performance.md", d.Bytes()}), nil
}

// Colors of the servers in the plots.
const (
	colorCeiling  = "#9a9a9a"
	colorBaseline = "#e08a2c"
	colorSluice   = "#3b75af"
	colorP50      = "#9ec3e6"
)

// serverColor tells the ceilings, the baseline or peer, and Sluice apart.
func serverColor(label string) string {
	switch {
	case strings.Contains(label, "ceiling"):
		return colorCeiling
	case strings.Contains(label, "baseline"), strings.Contains(label, "peer"):
		return colorBaseline
	}
	return colorSluice
}

// httpPlots plot the HTTP table: throughput, and p50 and p99 latency.
func httpPlots(s *benchSection) ([]page, string, error) {
	for _, t := range s.tables() {
		if t.column("configuration") == 0 && t.column("req/s") > 0 {
			return plotsOf(&t, "http", "HTTP check endpoint", func(r []string) string { return r[0] })
		}
	}
	return nil, "", fmt.Errorf("no configuration table in the HTTP section")
}

// rlsPlots plot the rate limit service's table from the lean generator
// when there is one (ghz's figures are mostly its own), else ghz's.
func rlsPlots(s *benchSection) ([]page, string, error) {
	var found []benchTable
	for _, t := range s.tables() {
		if t.column("scenario") == 0 && t.column("server") == 1 && t.column("req/s") > 0 {
			found = append(found, t)
		}
	}
	if len(found) == 0 {
		return nil, "", fmt.Errorf("no scenario/server table in the RLS section")
	}
	title := "Rate limit service (gRPC)"
	if len(found) > 1 {
		title += ", lean generator" // the report gives its table after ghz's
	}
	return plotsOf(&found[len(found)-1], "rls", title, func(r []string) string { return r[0] + " · " + r[1] })
}

// plotsOf writes the throughput and latency plots of table t, each row
// labeled by label, and the markdown that shows them.
func plotsOf(t *benchTable, name, title string, label func([]string) string) ([]page, string, error) {
	rps, p50, p99 := t.column("req/s"), t.column("p50"), t.column("p99")
	if p50 < 0 || p99 < 0 {
		return nil, "", fmt.Errorf("%s table: no p50 or p99 column", name)
	}
	var through, latency []barRow
	for _, r := range t.rows {
		v, ok1 := number(r[rps])
		a, ok2 := number(r[p50])
		b, ok3 := number(r[p99])
		if !ok1 || !ok2 || !ok3 {
			return nil, "", fmt.Errorf("%s table: unreadable row %q", name, r)
		}
		l := label(r)
		through = append(through, barRow{l, []bar{{v, serverColor(l), fmt.Sprintf("%.0f req/s", v)}}})
		latency = append(latency, barRow{l, []bar{{a, colorP50, "p50 " + r[p50]}, {b, serverColor(l), "p99 " + r[p99]}}})
	}
	throughFile, latencyFile := "img/bench/"+name+"-throughput.svg", "img/bench/"+name+"-latency.svg"
	pages := []page{
		{"docs/" + throughFile, barChart(title+": requests per second", "Throughput per configuration; grey: the bare ceilings, orange: the baseline or peer, blue: Sluice.", through)},
		{"docs/" + latencyFile, barChart(title+": latency (p50, p99)", "Latency per configuration at full load: p50 (light) and p99.", latency)},
	}
	md := fmt.Sprintf("![%s: requests per second](%s)\n\n![%s: latency](%s)\n\n", title, throughFile, title, latencyFile)
	return pages, md, nil
}
