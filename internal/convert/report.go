package convert

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

// Severity says how much a finding matters.
type Severity int

const (
	// Note: decisions carry over exactly; the finding is worth knowing
	// (statistics, ignored keys, what produces no policy on purpose).
	Note Severity = iota
	// Inexact: Sluice decides some requests differently from the source;
	// the finding says what happens instead.
	Inexact
	// Error: the source would refuse its own configuration, or the input
	// cannot be read; nothing is converted from it.
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

// Reportf is a report whose message is formatted.
func Reportf(pos Pos, s Severity, format string, args ...any) Report {
	return Report{Pos: pos, Severity: s, Message: fmt.Sprintf(format, args...)}
}

// String is FILE:LINE: SEVERITY: MESSAGE.
func (r Report) String() string {
	return fmt.Sprintf("%s: %s: %s", r.Pos, r.Severity, r.Message)
}

func (r Report) report() Report { return r }

// Reports collects reports as a converter finds them.
type Reports []Report

// Add adds a report whose message is formatted.
func (rs *Reports) Add(pos Pos, s Severity, format string, args ...any) {
	*rs = append(*rs, Reportf(pos, s, format, args...))
}

// Finding is a converter's report: a Report, or a report that embeds one
// and says more (which Ingress, which annotation).
type Finding interface {
	report() Report
}

// Sorted orders findings by file (in fileOrder's order), then line, then
// as found.
func Sorted[F Finding](findings []F, fileOrder map[string]int) []F {
	out := append([]F(nil), findings...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].report().Pos, out[j].report().Pos
		if a.File != b.File {
			return fileOrder[a.File] < fileOrder[b.File]
		}
		return a.Line < b.Line
	})
	return out
}

// Worst is the highest severity among findings; Note when there are none.
func Worst[F Finding](findings []F) Severity {
	worst := Note
	for _, f := range findings {
		worst = max(worst, f.report().Severity)
	}
	return worst
}
