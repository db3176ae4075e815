package convert

import (
	"fmt"
	"io"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Document is one policy to write, with the comment above it.
type Document struct {
	// Comment is the comment's lines, without "# ".
	Comment []string
	Policy  *ratelimitv1alpha1.RateLimitPolicy
}

// WriteYAML writes the documents as YAML separated by "---", each policy
// after its comment, and each document whole or not at all: a policy
// that cannot be written fails before any of its lines are.
func WriteYAML(w io.Writer, docs []Document) error {
	for i, d := range docs {
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
