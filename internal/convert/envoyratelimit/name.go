package envoyratelimit

import (
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/convert"
)

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

// dnsName turns a policy's words into a DNS label.
func dnsName(parts []string) string {
	if l := convert.DNSLabel(strings.Join(parts, "-")); l != "" {
		return l
	}
	return "envoy-ratelimit"
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
		if count[name] > 1 || len(name) > convert.MaxName {
			name = convert.WithHash(name, p.id, 8)
			if used[name] || count[name] > 0 {
				name = convert.WithHash(bases[i], p.id, 16)
			}
		}
		if used[name] {
			c.rs.Add(p.Source, convert.Error, "the policy name %s is taken by another descriptor (a converter bug)", name)
		}
		used[name] = true
		p.Object.Name = name
	}
}
