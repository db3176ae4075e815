package envoyratelimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/convert"
)

// level is one entry of a policy's descriptor: the node it matches and
// the conditions that leave its more specific siblings their values.
type level struct {
	n     *node
	conds []string
	// shared is set for a share_threshold wildcard: every value matching
	// it counts in the same bucket.
	shared bool
}

func (c *converter) walk(d *domain, path []level, sibs []*node) {
	for i, n := range sibs {
		lv, ok := c.level(d, path, sibs, i)
		if !ok {
			continue
		}
		p := slices.Concat(path, []level{lv})
		c.visit(d, p)
		c.walk(d, p, n.children)
	}
}

// limited reports whether n or a node nested in it has a limit.
func limited(n *node) bool {
	if n.rateLimit != nil && !n.rateLimit.unlimited {
		return true
	}
	return slices.ContainsFunc(n.children, limited)
}

// below says what an unconverted node takes with it.
func below(n *node) string {
	count := 0
	var walk func([]*node)
	walk = func(ns []*node) {
		for _, m := range ns {
			if m.rateLimit != nil && !m.rateLimit.unlimited {
				count++
			}
			walk(m.children)
		}
	}
	walk(n.children)
	if count == 0 {
		return ""
	}
	return fmt.Sprintf(", nor for the %d limited descriptor(s) nested in it", count)
}

// level works out which values of its entry the node at sibs[idx] gets in
// envoyproxy/ratelimit's walk, given the entry's key is the node's key:
// an exact map key always wins; a wildcard loses the values an exact map
// key or an earlier wildcard takes; a key-only node loses those of every
// exact map key and wildcard. It reports and returns false for a node
// that gets no value, or whose matching Sluice cannot express.
func (c *converter) level(d *domain, path []level, sibs []*node, idx int) (level, bool) {
	n := sibs[idx]
	lv := level{n: n}
	if n.value == "" && strings.HasSuffix(n.key, "*") {
		c.rs.Add(n.pos, convert.Inexact, "key '%s' without a value is a wildcard in envoyproxy/ratelimit: it matches any entry whose key_value starts with '%s', whatever its key; Sluice matches entry keys exactly, so there is no policy for it%s, and such descriptors are not limited",
			n.key, strings.TrimSuffix(n.key, "*"), below(n))
		return lv, false
	}
	c.checkSplits(d, n)
	a := amongSiblings(sibs, idx)
	lv.shared = a.wildcard && n.share.on
	if n.value != "" && !a.wildcard {
		return lv, true // an exact key_value is looked up first
	}
	prefixes, left := c.wildcardsTake(d, a)
	switch left {
	case literalValue:
		return c.literal(n, path)
	case noValue:
		return lv, false
	}
	prefixes = shortest(prefixes)
	exact := dropPrefixed(exactTake(a), prefixes)
	if len(exact) == 0 && len(prefixes) == 0 {
		return lv, true
	}
	return c.exclude(lv, path, exact, prefixes)
}

// among is a node among its siblings, with what their map keys are
// compared by.
type among struct {
	sibs []*node
	idx  int
	n    *node
	// kp is the node's key and "_", how the map keys of its entry's
	// values start.
	kp       string
	wildcard bool
	// prefix is the node's value, without a wildcard's '*'.
	prefix string
}

func amongSiblings(sibs []*node, idx int) among {
	n := sibs[idx]
	return among{sibs: sibs, idx: idx, n: n, kp: n.key + "_",
		wildcard: strings.HasSuffix(n.value, "*"), prefix: strings.TrimSuffix(n.value, "*")}
}

// exactTake are the values of the node's entry that its siblings with an
// exact map key take (for a wildcard, those it matches).
func exactTake(a among) []string {
	var exact []string
	for j, s := range a.sibs {
		if j == a.idx {
			continue
		}
		if v, ok := strings.CutPrefix(s.mapKey(), a.kp); ok && (!a.wildcard || strings.HasPrefix(v, a.prefix)) {
			exact = append(exact, v)
		}
	}
	return exact
}

// valuesLeft says what the wildcards among a node's siblings leave it.
type valuesLeft int

const (
	// someValues: the values but those starting with the prefixes given.
	someValues valuesLeft = iota
	// literalValue: a wildcard's own literal value only, which the exact
	// lookup of its map key still gives it.
	literalValue
	// noValue: none; the node is reported unreachable.
	noValue
)

// wildcardsTake are the prefixes of the values of the node's entry that
// its wildcard siblings take: for a key-only node every wildcard's, for a
// wildcard those of earlier wildcards that overlap it.
func (c *converter) wildcardsTake(d *domain, a among) ([]string, valuesLeft) {
	n, idx, kp, wildcard, prefix := a.n, a.idx, a.kp, a.wildcard, a.prefix
	var prefixes []string
	for j, s := range a.sibs {
		f := s.mapKey()
		if j == idx || !strings.HasSuffix(f, "*") {
			continue
		}
		t := strings.TrimSuffix(f, "*")
		var q string // s takes this entry's values starting with q
		switch {
		case len(t) <= len(kp):
			if !strings.HasPrefix(kp, t) {
				continue
			}
		case strings.HasPrefix(t, kp):
			q = t[len(kp):]
		default:
			continue
		}
		if wildcard {
			overlap := strings.HasPrefix(prefix, q) || strings.HasPrefix(q, prefix)
			if !overlap {
				continue
			}
			if s.file != n.file {
				if j < idx {
					c.rs.Add(n.pos, convert.Inexact, "this wildcard and the one at %s (another file of the merged domain '%s') both match values starting with '%s'; envoyproxy/ratelimit merges files in no fixed order, so which one wins varies; the policies give them to %s",
						s.pos, d.name, longer(prefix, q), s.pos)
				}
			}
			if j > idx {
				continue // a later wildcard loses to this one
			}
			if strings.HasPrefix(prefix, q) {
				// Only the exact lookup of its own map key reaches it.
				c.rs.Add(n.pos, convert.Note, "the wildcard at %s, before this one, takes every value it matches but the literal '%s' (map keys are looked up exactly first): the policies here match that literal value only", s.pos, n.value)
				return nil, literalValue
			}
		} else if q == "" {
			c.rs.Add(n.pos, convert.Note, "no descriptor reaches this node: the wildcard at %s takes every value of key '%s'; no policy for it%s", s.pos, n.key, below(n))
			return nil, noValue
		}
		prefixes = append(prefixes, q)
	}
	return prefixes, someValues
}

// exclude writes into lv the conditions that leave the values exact and
// prefixes to the more specific siblings.
func (c *converter) exclude(lv level, path []level, exact, prefixes []string) (level, bool) {
	n := lv.n
	key := n.key
	ref := "request.descriptor[" + celString(key) + "]"
	if repeatsKey(path, key) {
		c.rs.Add(n.pos, convert.Inexact, "descriptors whose entry %d (key '%s') is %s belong to more specific siblings in envoyproxy/ratelimit, but a policy can only test the first entry with key '%s' (request.descriptor), and it occurs earlier in this descriptor: this policy and those nested in it also match them",
			len(path)+1, key, describeExclusions(exact, prefixes), key)
		return lv, true
	}
	switch len(exact) {
	case 0:
	case 1:
		lv.conds = append(lv.conds, ref+" != "+celString(exact[0]))
	default:
		quoted := make([]string, len(exact))
		for i, v := range exact {
			quoted[i] = celString(v)
		}
		lv.conds = append(lv.conds, "!("+ref+" in ["+strings.Join(quoted, ", ")+"])")
	}
	for _, q := range prefixes {
		lv.conds = append(lv.conds, "!"+ref+".startsWith("+celString(q)+")")
	}
	return lv, true
}

// literal is the level of a wildcard that only its own literal value
// reaches.
func (c *converter) literal(n *node, path []level) (level, bool) {
	lv := level{n: n, shared: n.share.on}
	if repeatsKey(path, n.key) {
		c.rs.Add(n.pos, convert.Inexact, "only the literal value '%s' reaches this wildcard, but a policy can only test the first entry with key '%s' (request.descriptor), and it occurs earlier in this descriptor; no policy for it%s, so that value is not limited", n.value, n.key, below(n))
		return lv, false
	}
	lv.conds = []string{"request.descriptor[" + celString(n.key) + "] == " + celString(n.value)}
	return lv, true
}

// repeatsKey reports whether a level of path has key.
func repeatsKey(path []level, key string) bool {
	return slices.ContainsFunc(path, func(l level) bool { return l.n.key == key })
}

// shortest drops the prefixes another one covers.
func shortest(prefixes []string) []string {
	var out []string
	for i, q := range prefixes {
		covered := false
		for j, r := range prefixes {
			if i != j && strings.HasPrefix(q, r) && (len(r) < len(q) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, q)
		}
	}
	return out
}

func longer(a, b string) string {
	if len(a) > len(b) {
		return a
	}
	return b
}

// dropPrefixed removes the values a prefix already excludes.
func dropPrefixed(values, prefixes []string) []string {
	out := values[:0]
	for _, v := range values {
		covered := false
		for _, q := range prefixes {
			if strings.HasPrefix(v, q) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, v)
		}
	}
	return out
}

func describeExclusions(exact, prefixes []string) string {
	var parts []string
	for _, v := range exact {
		parts = append(parts, strconv.Quote(v))
	}
	for _, q := range prefixes {
		parts = append(parts, strconv.Quote(q)+"...")
	}
	return strings.Join(parts, " or ")
}

// checkSplits reports a node that envoyproxy/ratelimit also matches for
// entries of another key of the same domain: it looks up key+"_"+value,
// so an entry (k', v') with k'+"_"+v' equal to (or, for a wildcard,
// starting with) this node's map key matches here too, while a policy
// matches its own key only.
func (c *converter) checkSplits(d *domain, n *node) {
	f := n.mapKey()
	wildcard := strings.HasSuffix(f, "*")
	t := strings.TrimSuffix(f, "*")
	if !limited(n) {
		return // matching nothing here: the siblings' exclusions say so
	}
	var others []string
	for k := range d.keys {
		kp := k + "_"
		if k != n.key && (strings.HasPrefix(t, kp) || wildcard && strings.HasPrefix(kp, t)) {
			others = append(others, k)
		}
	}
	if len(others) == 0 {
		return
	}
	slices.Sort(others)
	c.rs.Add(n.pos, convert.Inexact, "envoyproxy/ratelimit matches entries by key+\"_\"+value, so entries with key %s whose key_value %s '%s' also match this node there; the policy matches entries with key '%s' only, and leaves those unlimited",
		quoteList(others), map[bool]string{true: "starts with", false: "is"}[wildcard], t, n.key)
}

// celString quotes s as a CEL string literal.
func celString(s string) string { return strconv.Quote(s) }

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + s + "'"
	}
	return strings.Join(q, ", ")
}
