package envoyratelimit

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/convert"
)

// Document is the policy after a comment that names the descriptor it
// came from.
func (p Policy) Document() convert.Document {
	d := convert.Document{Policy: p.Object,
		Comment: []string{fmt.Sprintf("%s: domain %s, descriptor (%s)", p.Source, p.Object.Spec.Match.Domain, p.Descriptor)}}
	if p.Note != "" {
		d.Comment = append(d.Comment, p.Note)
	}
	return d
}
