package convert

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Document is one policy to write, with the comment above it.
type Document struct {
	// Comment is the comment's lines, without "# ".
	Comment []string
	Policy  *ratelimitv1alpha1.RateLimitPolicy
}

// Converted is a converter's policy, which says how it is written.
type Converted interface {
	Document() Document
}

// WriteYAML writes the policies as YAML documents separated by "---", each
// policy after its comment, and each document whole or not at all: a
// policy that cannot be written fails before any of its lines are.
func WriteYAML[P Converted](w io.Writer, policies []P) error {
	for i, p := range policies {
		d := p.Document()
		doc, err := PolicyYAML(d.Policy)
		if err != nil {
			return fmt.Errorf("policy %s: %w", d.Policy.Name, err)
		}
		var b strings.Builder
		if i > 0 {
			b.WriteString("---\n")
		}
		for _, line := range d.Comment {
			b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
		}
		b.Write(doc)
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
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
