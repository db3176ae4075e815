package envoyconvert

import (
	"fmt"
	"sort"
)

// Pos is a place in an input file.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Severity says how much a report matters.
type Severity int

const (
	// Note: carried over exactly as far as decisions go (statistics,
	// ignored keys, nodes that produce no policy on purpose).
	Note Severity = iota
	// Inexact: Sluice decides some requests differently; the report says
	// what happens instead.
	Inexact
	// Error: envoyproxy/ratelimit refuses the configuration, so there is
	// nothing to convert.
	Error
)

func (s Severity) String() string {
	switch s {
	case Note:
		return "note"
	case Inexact:
		return "inexact"
	default:
		return "error"
	}
}

// Report is one finding, at the line it is about.
type Report struct {
	Pos      Pos
	Severity Severity
	Message  string
}

func (r Report) String() string {
	return fmt.Sprintf("%s: %s: %s", r.Pos, r.Severity, r.Message)
}

// reports collects findings.
type reports []Report

func (rs *reports) add(pos Pos, s Severity, format string, args ...any) {
	*rs = append(*rs, Report{Pos: pos, Severity: s, Message: fmt.Sprintf(format, args...)})
}

// sorted orders reports by file (in the given order), line, then as found.
func (rs reports) sorted(fileOrder map[string]int) []Report {
	out := append([]Report(nil), rs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Pos, out[j].Pos
		if a.File != b.File {
			return fileOrder[a.File] < fileOrder[b.File]
		}
		return a.Line < b.Line
	})
	return out
}
