package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxName keeps policy names DNS labels, short enough to read in Redis
// keys, metrics and the RateLimit-Policy header.
const MaxName = 63

// DNSLabel turns text into the words of a DNS label: lower-case letters
// and digits, other characters as single dashes, none at either end; ""
// when nothing is left. It does not bound the length (see WithHash).
func DNSLabel(text string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(text) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// WithHash shortens name to fit "-" and hexDigits of a hash of id after it
// within MaxName.
func WithHash(name, id string, hexDigits int) string {
	sum := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(sum[:])[:hexDigits]
	keep := MaxName - hexDigits - 1
	if len(name) > keep {
		name = strings.TrimRight(name[:keep], "-")
	}
	return name + "-" + h
}
