package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The performance page is made from the results `make bench BENCH_SAVE=1`
// saves in bench/ (hack/bench's report): for each part of the benchmark,
// the newest file that has it. The report is markdown written by the
// benchmark, so its sections are copied as they are and its tables read
// for the plots; nothing on the page is typed by hand.

// benchFile is one saved run.
type benchFile struct {
	path    string
	at      time.Time
	machine string
	// sections are the file's "## " sections, by title.
	sections []benchSection
}

// benchSection is one "## " section of a run: its title and lines.
type benchSection struct {
	title string
	lines []string
}

const benchTitle = "# Sluice check-path benchmark, "

// readBenchFiles reads every bench/*.md of root, newest first.
func readBenchFiles(root string) ([]benchFile, error) {
	paths, err := filepath.Glob(filepath.Join(root, "bench", "*.md"))
	if err != nil {
		return nil, err
	}
	var files []benchFile
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f, err := parseBenchFile(string(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		f.path = filepath.ToSlash(filepath.Join("bench", filepath.Base(p)))
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b benchFile) int { return b.at.Compare(a.at) })
	return files, nil
}

func parseBenchFile(text string) (benchFile, error) {
	var f benchFile
	lines := strings.Split(text, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], benchTitle) {
		return f, fmt.Errorf("does not start with %q", benchTitle)
	}
	at, err := time.Parse("2006-01-02 15:04 MST", strings.TrimPrefix(lines[0], benchTitle))
	if err != nil {
		return f, err
	}
	f.at = at
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "Machine: "):
			f.machine = l
		case strings.HasPrefix(l, "## "):
			f.sections = append(f.sections, benchSection{title: strings.TrimPrefix(l, "## ")})
		case len(f.sections) > 0:
			s := &f.sections[len(f.sections)-1]
			s.lines = append(s.lines, l)
		}
	}
	return f, nil
}

// newestSection finds the newest run with a section whose title starts
// with prefix.
func newestSection(files []benchFile, prefix string) (*benchFile, *benchSection) {
	for i := range files {
		for j := range files[i].sections {
			if strings.HasPrefix(files[i].sections[j].title, prefix) {
				return &files[i], &files[i].sections[j]
			}
		}
	}
	return nil, nil
}

// body is a section's text for the page, without the CPU profiles
// (long, and for whoever tunes the code: they stay in bench/).
func (s *benchSection) body() string {
	var out []string
	skip := false
	for _, l := range s.lines {
		if strings.HasPrefix(l, "### ") {
			skip = strings.HasPrefix(l, "### CPU profile")
		}
		if skip {
			continue
		}
		// Python-Markdown, which mkdocs renders with, starts a list only
		// after a blank line and nests by four spaces.
		if strings.HasPrefix(l, "- ") && len(out) > 0 && out[len(out)-1] != "" && !isListItem(out[len(out)-1]) {
			out = append(out, "")
		}
		if rest, ok := strings.CutPrefix(l, "  - "); ok {
			l = "    - " + rest
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func isListItem(l string) bool {
	return strings.HasPrefix(strings.TrimLeft(l, " "), "- ")
}

// benchTable is a table of a section: its header and rows of cells.
type benchTable struct {
	head []string
	rows [][]string
}

// tables reads the section's tables, in order.
func (s *benchSection) tables() []benchTable {
	var out []benchTable
	var cur *benchTable
	for _, l := range s.lines {
		if !strings.HasPrefix(l, "|") {
			cur = nil
			continue
		}
		cells := splitRow(l)
		switch {
		case cur == nil:
			out = append(out, benchTable{head: cells})
			cur = &out[len(out)-1]
		case strings.HasPrefix(strings.TrimSpace(cells[0]), "---"):
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return out
}

func splitRow(l string) []string {
	cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// column is the index of the column named name; -1 when none.
func (t *benchTable) column(name string) int { return slices.Index(t.head, name) }

// number reads a cell: a count, or a duration (µs, ms, s) in ms.
func number(cell string) (float64, bool) {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"µs", 0.001}, {"ms", 1}, {"s", 1000}} {
		if v, ok := strings.CutSuffix(cell, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.scale, err == nil
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(cell, ",", ""), 64)
	return f, err == nil
}
