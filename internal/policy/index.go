package policy

import (
	"slices"
	"strings"
)

// namespaceIndex narrows a namespace's policies to those a request can
// match, so a check evaluates the candidates rather than every policy.
// It only ever drops a policy whose spec.match hosts or paths rule the
// request out: the matcher still decides each candidate, so what matches
// is what a scan of every policy would find.
//
// Each HTTP policy is filed under one dimension, the one of its hosts or
// its paths that fewer other policies share (a policy whose hosts are all
// different but whose paths are all "/*" is filed by host): a request can
// match it only if one of its entries in that dimension matches.
type namespaceIndex struct {
	// everywhere are the HTTP policies with neither hosts nor paths.
	everywhere []*Policy
	// descriptors are the descriptor policies, the only ones a
	// descriptor request can match.
	descriptors []*Policy
	hosts       keyIndex // by spec.match.hosts: exact, or suffix ("*.example.com")
	paths       keyIndex // by spec.match.paths: exact, or prefix ("/api/*")
}

// keyIndex files policies by exact strings, and by affixes (suffixes of
// hosts, prefixes of paths) looked up once per affix length in use.
type keyIndex struct {
	exact   map[string][]*Policy
	affix   map[string][]*Policy
	lengths []int // the distinct lengths of affix's keys, ascending
}

func newNamespaceIndex(policies []*Policy) *namespaceIndex {
	x := &namespaceIndex{}
	var hostCount, pathCount map[string]int
	for _, p := range policies {
		m := &p.match
		hostCount = countKeys(hostCount, m.exactHosts, m.hostSuffixes)
		pathCount = countKeys(pathCount, m.exactPaths, m.pathPrefixes)
	}
	for _, p := range policies {
		m := &p.match
		hasHosts := len(m.exactHosts)+len(m.hostSuffixes) > 0
		hasPaths := len(m.exactPaths)+len(m.pathPrefixes) > 0
		switch {
		case m.forDescriptors:
			x.descriptors = append(x.descriptors, p)
		case !hasHosts && !hasPaths:
			x.everywhere = append(x.everywhere, p)
		case hasHosts && (!hasPaths || sharing(hostCount, m.exactHosts, m.hostSuffixes) <= sharing(pathCount, m.exactPaths, m.pathPrefixes)):
			x.hosts.add(p, m.exactHosts, m.hostSuffixes)
		default:
			x.paths.add(p, m.exactPaths, m.pathPrefixes)
		}
	}
	return x
}

// countKeys counts, per exact key and per affix, the policies listing it
// (affixes kept apart from exact keys by a leading NUL, which neither a
// host nor a path holds).
func countKeys(count map[string]int, exact, affixes []string) map[string]int {
	if count == nil {
		count = map[string]int{}
	}
	for _, k := range exact {
		count[k]++
	}
	for _, k := range affixes {
		count["\x00"+k]++
	}
	return count
}

// sharing is how many policies a request can select at most through the
// entries of one dimension of a policy.
func sharing(count map[string]int, exact, affixes []string) int {
	n := 0
	for _, k := range exact {
		n += count[k]
	}
	for _, k := range affixes {
		n += count["\x00"+k]
	}
	return n
}

func (k *keyIndex) add(p *Policy, exact, affixes []string) {
	if k.exact == nil {
		k.exact, k.affix = map[string][]*Policy{}, map[string][]*Policy{}
	}
	for _, s := range exact {
		k.exact[s] = appendOnce(k.exact[s], p)
	}
	for _, s := range affixes {
		k.affix[s] = appendOnce(k.affix[s], p)
		if !slices.Contains(k.lengths, len(s)) {
			k.lengths = append(k.lengths, len(s))
			slices.Sort(k.lengths)
		}
	}
}

// appendOnce appends p unless it is last already (a policy listing one
// key twice).
func appendOnce(ps []*Policy, p *Policy) []*Policy {
	if len(ps) > 0 && ps[len(ps)-1] == p {
		return ps
	}
	return append(ps, p)
}

// appendHost appends the policies filed under a hostname host matches:
// its exact entry, and each suffix shorter than host ("*.example.com"
// needs a label before ".example.com").
func (k *keyIndex) appendHost(dst []*Policy, host string) []*Policy {
	dst = append(dst, k.exact[host]...)
	for _, n := range k.lengths {
		if n >= len(host) {
			break
		}
		dst = append(dst, k.affix[host[len(host)-n:]]...)
	}
	return dst
}

// appendPath appends the policies filed under a path path matches: its
// exact entry and each of its prefixes in use.
func (k *keyIndex) appendPath(dst []*Policy, path string) []*Policy {
	dst = append(dst, k.exact[path]...)
	for _, n := range k.lengths {
		if n > len(path) {
			break
		}
		dst = append(dst, k.affix[path[:n]]...)
	}
	return dst
}

// appendCandidates appends to dst the policies r can match, in name order
// and once each.
func (x *namespaceIndex) appendCandidates(dst []*Policy, r *Request) []*Policy {
	if r.Kind == KindDescriptor {
		return append(dst, x.descriptors...)
	}
	start := len(dst)
	dst = append(dst, x.everywhere...)
	dst = x.hosts.appendHost(dst, r.Host)
	dst = x.paths.appendPath(dst, r.Path)
	for _, p := range r.AltPaths {
		if p != "" {
			dst = x.paths.appendPath(dst, p)
		}
	}
	slices.SortFunc(dst[start:], byName)
	return dst[:start+len(slices.Compact(dst[start:]))]
}

func byName(a, b *Policy) int { return strings.Compare(a.Name, b.Name) }
