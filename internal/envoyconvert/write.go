package envoyconvert

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/conversion"
)

// WriteYAML writes the policies as YAML documents separated by "---", each
// after a comment that names the descriptor it came from.
func WriteYAML(w io.Writer, policies []Policy) error {
	for i, p := range policies {
		doc, err := conversion.PolicyYAML(p.Object)
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
