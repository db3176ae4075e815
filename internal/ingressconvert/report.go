package ingressconvert

import (
	"fmt"
	"sort"
	"strings"
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
	// Note: decisions carry over exactly (or ingress-nginx enforced
	// nothing there either); the report says something worth knowing.
	Note Severity = iota
	// Inexact: something ingress-nginx enforced is not carried over, or
	// is carried over differently; the report says what happens instead.
	Inexact
	// Error: ingress-nginx refuses the Ingress (or nginx its
	// configuration), or the input cannot be read; no policy is written
	// for that Ingress.
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
