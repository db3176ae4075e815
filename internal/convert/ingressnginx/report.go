package ingressnginx

import (
	"strings"

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

// Report is one finding about one Ingress, at the line it is about.
type Report struct {
	Pos Pos
	// Ingress is "namespace/name" (or "name" when the manifest names no
	// namespace); "" for a finding about the input itself.
	Ingress string
	// Annotation is the annotation's name without its prefix
	// ("limit-rps"), or "" when the finding is about something else.
	Annotation string
	Severity   Severity
	Message    string
}

// String is FILE:LINE: INGRESS: annotation NAME: SEVERITY: MESSAGE, the
// parts that are empty left out.
func (r Report) String() string {
	parts := []string{r.Pos.String()}
	if r.Ingress != "" {
		parts = append(parts, r.Ingress)
	}
	if r.Annotation != "" {
		parts = append(parts, "annotation "+r.Annotation)
	}
	parts = append(parts, r.Severity.String(), r.Message)
	return strings.Join(parts, ": ")
}

// reports collects findings.
type reports []Report

func (rs *reports) add(r Report) { *rs = append(*rs, r) }

// sorted orders reports by file (in the given order), line, then as found.
func (rs reports) sorted(fileOrder map[string]int) []Report {
	return convert.SortByPos(rs, func(r *Report) Pos { return r.Pos }, fileOrder)
}
