package ingressnginx

import (
	"strings"

	"github.com/sluice-dev/sluice/internal/convert"
)

// Report is one finding about one Ingress, at the line it is about.
type Report struct {
	convert.Report
	// Ingress is "namespace/name" (or "name" when the manifest names no
	// namespace); "" for a finding about the input itself.
	Ingress string
	// Annotation is the annotation's name without its prefix
	// ("limit-rps"), or "" when the finding is about something else.
	Annotation string
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

// add adds a finding about the input itself, not about one Ingress.
func (rs *reports) add(pos convert.Pos, s convert.Severity, format string, args ...any) {
	*rs = append(*rs, Report{Report: convert.Reportf(pos, s, format, args...)})
}
