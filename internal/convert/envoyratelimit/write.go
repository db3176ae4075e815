package envoyratelimit

import (
	"fmt"
	"io"

	"github.com/sluice-dev/sluice/internal/convert"
)

// WriteYAML writes the policies as YAML documents separated by "---", each
// after a comment that names the descriptor it came from.
func WriteYAML(w io.Writer, policies []Policy) error {
	docs := make([]convert.Document, len(policies))
	for i, p := range policies {
		docs[i] = convert.Document{Policy: p.Object,
			Comment: []string{fmt.Sprintf("%s: domain %s, descriptor (%s)", p.Source, p.Object.Spec.Match.Domain, p.Descriptor)}}
		if p.Note != "" {
			docs[i].Comment = append(docs[i].Comment, p.Note)
		}
	}
	return convert.WriteYAML(w, docs)
}
