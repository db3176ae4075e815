// Command docgen writes the generated pages of the docs site from the code
// and the committed results they describe: the API reference from the
// CRDs, the metrics, the manager's and kubectl sluice's commands and flags,
// the /v1/check JSON API, the Grafana dashboard's panels and queries and
// the alert rules, a picture of each algorithm plotted from its Go
// model, and the performance page from the newest bench/ results. `make
// docs-generate` runs it; its test fails when a committed page is stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// page is one generated file, its path relative to the repository.
type page struct {
	path string
	data []byte
}

// generator makes pages from the repository at root.
type generator func(root string) ([]page, error)

// generators are every page's makers, in the order they run.
var generators = []struct {
	name string
	run  generator
}{
	{"api reference", apiPages},
	{"metrics", metricsPages},
	{"manager", managerPages},
	{"kubectl sluice", kubectlPages},
	{"/v1/check", v1CheckPages},
	{"algorithms", algorithmPages},
	{"performance", performancePages},
	{"grafana dashboard and alerts", prometheusPages},
}

// generate runs every generator on the repository at root.
func generate(root string) ([]page, error) {
	var pages []page
	for _, g := range generators {
		ps, err := g.run(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.name, err)
		}
		pages = append(pages, ps...)
	}
	return pages, nil
}

func main() {
	root := flag.String("root", ".", "the repository to read and write")
	flag.Parse()
	pages, err := generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	for _, p := range pages {
		file := filepath.Join(*root, p.path)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(file, p.data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(1)
		}
	}
}
