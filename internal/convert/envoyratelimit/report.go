package envoyratelimit

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/convert"
)

// Pos, Severity and the severities are the converters' shared ones.
type (
	Pos      = convert.Pos
	Severity = convert.Severity
)

const (
	Note    = convert.Note
	Inexact = convert.Inexact
	Error   = convert.Error
)

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
	return convert.SortByPos(rs, func(r *Report) Pos { return r.Pos }, fileOrder)
}
