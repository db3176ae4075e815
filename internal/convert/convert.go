// Package convert is `manager convert`: turning other rate limiters'
// configuration into RateLimitPolicy objects. Each format has a package
// below it (envoyratelimit, ingressnginx); this one holds what they share:
// the command, where a finding is, how much it matters, the order reports
// are given in, and a policy written as YAML the way a person would write it.
package convert

import (
	"encoding/json"
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
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

// SortByPos orders items by their position: files in fileOrder's order,
// then lines, then as found.
func SortByPos[T any](items []T, pos func(*T) Pos, fileOrder map[string]int) []T {
	out := append([]T(nil), items...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := pos(&out[i]), pos(&out[j])
		if a.File != b.File {
			return fileOrder[a.File] < fileOrder[b.File]
		}
		return a.Line < b.Line
	})
	return out
}

// PolicyYAML is the object as a person would write it: no status, no
// empty creationTimestamp or response.
func PolicyYAML(p *ratelimitv1alpha1.RateLimitPolicy) ([]byte, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok {
		if r, ok := spec["response"].(map[string]any); ok && len(r) == 0 {
			delete(spec, "response")
		}
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(m)
}
