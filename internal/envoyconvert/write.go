package envoyconvert

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// WriteYAML writes the policies as YAML documents separated by "---", each
// after a comment that names the descriptor it came from.
func WriteYAML(w io.Writer, policies []Policy) error {
	for i, p := range policies {
		doc, err := policyYAML(p)
		if err != nil {
			return fmt.Errorf("policy %s: %w", p.Object.Name, err)
		}
		var b strings.Builder
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, "# %s: domain %s, descriptor (%s)\n", p.Source, p.Object.Spec.Match.Domain, p.Descriptor)
		if p.Note != "" {
			fmt.Fprintf(&b, "# %s\n", p.Note)
		}
		b.Write(doc)
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// policyYAML is the object as a person would write it: no status, no
// empty creationTimestamp.
func policyYAML(p Policy) ([]byte, error) {
	raw, err := json.Marshal(p.Object)
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
