package envoyratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxName keeps policy names DNS labels, short enough to read in Redis
// keys, metrics and the RateLimit-Policy header.
const maxName = 63

// nameParts are the words of a policy's name: the domain, then each
// entry's key and value (a wildcard's prefix).
func nameParts(domain string, path []level) []string {
	parts := []string{domain}
	for _, l := range path {
		parts = append(parts, l.n.key)
		if v := strings.TrimSuffix(l.n.value, "*"); v != "" {
			parts = append(parts, v)
		}
	}
	return parts
}

// identity names a policy's domain and descriptor unambiguously.
func identity(domain string, path []level) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(domain))
	for _, l := range path {
		b.WriteString("/" + strconv.Quote(l.n.key))
		if l.n.value != "" {
			b.WriteString("=" + strconv.Quote(l.n.value))
		}
	}
	return b.String()
}

// dnsName turns words into a DNS label: lower-case letters and digits,
// other characters as single dashes, none at either end.
func dnsName(parts []string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(strings.Join(parts, "-")) {
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
	if b.Len() == 0 {
		return "envoy-ratelimit"
	}
	return b.String()
}

// withHash shortens name to fit a hash of id after it.
func withHash(name, id string, hexDigits int) string {
	sum := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(sum[:])[:hexDigits]
	keep := maxName - hexDigits - 1
	if len(name) > keep {
		name = strings.TrimRight(name[:keep], "-")
	}
	return name + "-" + h
}

// name gives every policy a unique DNS label from its domain and
// descriptor; a name that is too long, or that two descriptors would
// share, carries a hash of its descriptor.
func (c *converter) name() {
	bases := make([]string, len(c.policies))
	count := map[string]int{}
	for i := range c.policies {
		bases[i] = dnsName(c.policies[i].nameParts)
		count[bases[i]]++
	}
	used := map[string]bool{}
	for i := range c.policies {
		p := &c.policies[i]
		name := bases[i]
		if count[name] > 1 || len(name) > maxName {
			name = withHash(name, p.id, 8)
			if used[name] || count[name] > 0 {
				name = withHash(bases[i], p.id, 16)
			}
		}
		if used[name] {
			c.rs.add(p.Source, Error, "the policy name %s is taken by another descriptor (a converter bug)", name)
		}
		used[name] = true
		p.Object.Name = name
	}
}
