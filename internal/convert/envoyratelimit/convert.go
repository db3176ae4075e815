package envoyratelimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Options shape the converted policies.
type Options struct {
	// Namespace of every policy; "default" when empty. The check process
	// must bind each domain to it (--rls-domain DOMAIN=NAMESPACE).
	Namespace string
	// FailureMode of every policy; Open when empty, which is what Envoy's
	// rate limit filter does when envoyproxy/ratelimit cannot answer
	// (failure_mode_deny: false, its default).
	FailureMode ratelimitv1alpha1.FailureMode
	// MergeDomains accepts a domain in several files, merging their
	// top-level descriptors, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG.
	MergeDomains bool
}

// Policy is one converted policy.
type Policy struct {
	Object *ratelimitv1alpha1.RateLimitPolicy
	// Source is the descriptor the policy comes from.
	Source convert.Pos
	// Descriptor describes the matched descriptor, such as
	// "remote_address, path=/api/*" (a key alone matches any value).
	Descriptor string
	// Note is a remark for the YAML comment above the policy ("" for none).
	Note string

	nameParts []string // what the name is made of
	id        string   // the domain and descriptor, unambiguously
}

// Result is what Convert found: the policies, and the reports in file and
// line order.
type Result struct {
	Policies []Policy
	Reports  []convert.Report
	// Domains are the domains converted, in input order: each must be
	// bound to the namespace with --rls-domain DOMAIN=NAMESPACE.
	Domains []string
}

// Worst is the highest severity reported; Note when nothing was.
func (r *Result) Worst() convert.Severity { return convert.Worst(r.Reports) }

// Annotations written on every converted policy.
const (
	// AnnotationSource names the file and line of the descriptor.
	AnnotationSource = "ratelimit.sluice.dev/envoy-ratelimit-source"
	// AnnotationName is the rate_limit's name, when it had one.
	AnnotationName = "ratelimit.sluice.dev/envoy-ratelimit-name"
)

// API bounds a converted policy must respect (api/v1alpha1).
const (
	maxEntries     = 16
	maxKeyBytes    = 256
	maxValueBytes  = 1024
	maxDomainBytes = 253
	maxWhenBytes   = 4096
	maxTemplate    = 512
	maxCount       = 1_000_000_000
)

// denyKeyEntry is the descriptor entry the key of a requests_per_unit: 0
// policy reads: a policy matches only descriptors with its own entries, so
// with a name none of them has it is never there, and onMissingKey Deny
// denies every request without counting it.
const denyKeyEntry = "sluice-no-such-entry"

// domain is a domain's configuration, from one file or merged from several.
type domain struct {
	name  string
	pos   convert.Pos
	nodes []*node
	// named are the limited nodes by rate_limit name, for replaces.
	named map[string][]*node
	// keys are every entry key used in the domain.
	keys map[string]bool
}

// Convert converts files as envoyproxy/ratelimit loads them together.
// When any file is refused (a report of severity Error), there are no
// policies: envoyproxy/ratelimit would not load the configuration either.
func Convert(files []convert.File, opts Options) *Result {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.FailureMode == "" {
		opts.FailureMode = ratelimitv1alpha1.FailureModeOpen
	}
	var rs convert.Reports
	order := map[string]int{}
	var configs []*config
	for i, f := range files {
		order[f.Name] = i
		if c := parseFile(f, i, &rs); c != nil {
			configs = append(configs, c)
		}
	}
	res := &Result{}
	domains := mergeDomains(configs, opts.MergeDomains, &rs)
	for _, d := range domains {
		checkDuplicates(d.name, d.nodes, &rs)
	}
	if convert.Worst(rs) == convert.Error {
		res.Reports = convert.Sorted(rs, order)
		return res
	}
	c := &converter{opts: opts, rs: &rs}
	for _, d := range domains {
		res.Domains = append(res.Domains, d.name)
		before := len(c.policies)
		c.walk(d, nil, d.nodes)
		if len(c.policies) > before {
			rs.Add(d.pos, convert.Note, "%s", chargeNote)
		}
	}
	c.name()
	c.compile()
	res.Policies = c.policies
	res.Reports = convert.Sorted(rs, order)
	if convert.Worst(rs) == convert.Error {
		res.Policies = nil
	}
	return res
}

// chargeNote says how the converted policies count differently from
// envoyproxy/ratelimit, which increments every descriptor's counter before
// it decides: it counts denied requests' hits, and a request's other
// descriptors when one denies it.
const chargeNote = "envoyproxy/ratelimit counts a denied request's hits too, and the request's other descriptors when one is over its limit " +
	"(unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); these policies count admitted requests only, all descriptors or none, " +
	"so after a denial they may admit what it would deny (charge: Always counts a denied request's cost, as it does)"

// mergeDomains groups the files by domain: a domain in two files is an
// error unless merging, when the later file's top-level descriptors follow
// the earlier's.
func mergeDomains(configs []*config, merge bool, rs *convert.Reports) []*domain {
	var out []*domain
	byName := map[string]*domain{}
	for _, c := range configs {
		d := byName[c.domain]
		if d == nil {
			d = &domain{name: c.domain, pos: c.domainPos, named: map[string][]*node{}, keys: map[string]bool{}}
			byName[c.domain] = d
			out = append(out, d)
		} else if !merge {
			rs.Add(c.domainPos, convert.Error, "duplicate domain '%s' in config file (also at %s); envoyproxy/ratelimit merges them only with MERGE_DOMAIN_CONFIG=true, the converter with --merge-domains", c.domain, d.pos)
			continue
		}
		d.nodes = append(d.nodes, c.nodes...)
	}
	for _, d := range out {
		var index func([]*node)
		index = func(ns []*node) {
			for _, n := range ns {
				d.keys[n.key] = true
				if rl := n.rateLimit; rl != nil && rl.name != "" && !rl.unlimited {
					d.named[rl.name] = append(d.named[rl.name], n)
				}
				index(n.children)
			}
		}
		index(d.nodes)
	}
	return out
}

// checkDuplicates refuses two siblings with the same map key, as
// loadDescriptors does.
func checkDuplicates(prefix string, sibs []*node, rs *convert.Reports) {
	seen := map[string]*node{}
	for _, n := range sibs {
		k := n.mapKey()
		if first, dup := seen[k]; dup {
			rs.Add(n.pos, convert.Error, "duplicate descriptor composite key '%s.%s' (also at %s)", prefix, k, first.pos)
			continue
		}
		seen[k] = n
		checkDuplicates(prefix+"."+k, n.children, rs)
	}
}

// converter turns a domain's tree into policies.
type converter struct {
	opts     Options
	rs       *convert.Reports
	policies []Policy
}

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
	key := n.key
	kp := key + "_"
	wildcard := strings.HasSuffix(n.value, "*")
	prefix := strings.TrimSuffix(n.value, "*")
	lv.shared = wildcard && n.share.on
	if n.value != "" && !wildcard {
		return lv, true // an exact key_value is looked up first
	}

	var exact, prefixes []string
	for j, s := range sibs {
		if j == idx {
			continue
		}
		if v, ok := strings.CutPrefix(s.mapKey(), kp); ok && (!wildcard || strings.HasPrefix(v, prefix)) {
			exact = append(exact, v)
		}
	}
	for j, s := range sibs {
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
				return c.literal(n, path)
			}
		} else if q == "" {
			c.rs.Add(n.pos, convert.Note, "no descriptor reaches this node: the wildcard at %s takes every value of key '%s'; no policy for it%s", s.pos, key, below(n))
			return lv, false
		}
		prefixes = append(prefixes, q)
	}
	prefixes = shortest(prefixes)
	exact = dropPrefixed(exact, prefixes)
	if len(exact) == 0 && len(prefixes) == 0 {
		return lv, true
	}

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

// visit makes the policy of the last node of path, or reports why there
// is none.
func (c *converter) visit(d *domain, path []level) {
	n := path[len(path)-1].n
	rl := n.rateLimit
	for _, f := range []struct {
		flag setting
		name string
	}{{n.detailed, "detailed_metric"}, {n.valueToMetric, "value_to_metric"}} {
		if !f.flag.on {
			continue
		}
		if rl == nil {
			c.rs.Add(f.flag.pos, convert.Note, "%s without a rate_limit on this descriptor: no effect in envoyproxy/ratelimit (it is not inherited)", f.name)
			continue
		}
		c.rs.Add(f.flag.pos, convert.Note, "%s names envoyproxy/ratelimit's statistics by descriptor value; Sluice's metrics count by policy and limit (sluice_decisions_total), so the per-value series are gone; decisions are the same", f.name)
	}
	if rl == nil {
		for _, f := range []struct {
			flag setting
			name string
		}{{n.shadow, "shadow_mode"}, {n.quota, "quota_mode"}} {
			if f.flag.on {
				c.rs.Add(f.flag.pos, convert.Note, "%s without a rate_limit on this descriptor: no effect in envoyproxy/ratelimit (it is not inherited by nested descriptors)", f.name)
			}
		}
		return
	}
	c.checkReplaces(d, n)
	if rl.unlimited {
		c.rs.Add(rl.pos, convert.Note, "unlimited: no policy; its descriptors are answered OK and counted nowhere, as the other policies of this domain exclude them")
		return
	}
	c.emit(d, path)
}

func (c *converter) checkReplaces(d *domain, n *node) {
	for _, r := range n.rateLimit.replaces {
		targets := d.named[r.name]
		if len(targets) == 0 {
			c.rs.Add(r.pos, convert.Note, "replaces '%s': no limit of domain '%s' is named so; no effect", r.name, d.name)
			continue
		}
		var at []string
		for _, t := range targets {
			at = append(at, t.pos.String())
		}
		c.rs.Add(r.pos, convert.Inexact, "replaces '%s' (%s): envoyproxy/ratelimit does not apply that limit to a request that also has a descriptor matching this one; Sluice decides each descriptor on its own, so it still applies there (counted, and denying when over)",
			r.name, strings.Join(at, ", "))
	}
}

// emit adds the policy of path's last node.
func (c *converter) emit(d *domain, path []level) {
	n := path[len(path)-1].n
	rl := n.rateLimit
	if len(path) > maxEntries {
		c.rs.Add(n.pos, convert.Inexact, "a descriptor of %d entries: a policy matches at most %d; no policy, so these descriptors are not limited", len(path), maxEntries)
		return
	}
	if len(d.name) > maxDomainBytes {
		c.rs.Add(n.pos, convert.Inexact, "domain '%s' is longer than %d bytes, match.domain's bound; no policy, so these descriptors are not limited", d.name, maxDomainBytes)
		return
	}
	spec := ratelimitv1alpha1.RateLimitPolicySpec{
		Match:       ratelimitv1alpha1.RequestMatch{Domain: d.name},
		FailureMode: c.opts.FailureMode,
	}
	var conds []string
	var desc []string
	for _, l := range path {
		e := ratelimitv1alpha1.DescriptorEntryMatch{Key: l.n.key}
		if len(l.n.key) > maxKeyBytes || len(l.n.value) > maxValueBytes {
			c.rs.Add(n.pos, convert.Inexact, "entry '%s' exceeds a policy's bounds (keys of %d bytes, values of %d); no policy, so these descriptors are not limited", l.n.key, maxKeyBytes, maxValueBytes)
			return
		}
		if l.n.value != "" {
			v := l.n.value
			e.Value = &v
			desc = append(desc, l.n.key+"="+v)
		} else {
			desc = append(desc, l.n.key)
		}
		spec.Match.Descriptor = append(spec.Match.Descriptor, e)
		conds = append(conds, l.conds...)
	}
	spec.Match.When = strings.Join(conds, " && ")
	if len(spec.Match.When) > maxWhenBytes {
		c.rs.Add(n.pos, convert.Inexact, "the exclusions of this descriptor's more specific siblings need a match.when of %d bytes, over its bound of %d; written without them, the policy also limits descriptors that envoyproxy/ratelimit gives to those siblings", len(spec.Match.When), maxWhenBytes)
		spec.Match.When = ""
	}
	key, ok := c.sharedKey(path)
	if !ok {
		return
	}
	spec.Key = key

	limit := int64(rl.requestsPerUnit)
	note := ""
	switch {
	case limit == 0:
		spec.Key = "{descriptor:" + denyKeyEntry + "}"
		spec.OnMissingKey = ratelimitv1alpha1.OnMissingKeyDeny
		limit = 1
		note = "requests_per_unit: 0 denies every request: the key reads an entry these descriptors never have, and onMissingKey Deny denies them (nothing is counted)"
	case limit > maxCount:
		c.rs.Add(rl.rpuPos, convert.Inexact, "requests_per_unit %d is above a policy's most, %d; written as %d", limit, maxCount, maxCount)
		limit = maxCount
	}
	spec.Limits = []ratelimitv1alpha1.Limit{{
		Name: ratelimitv1alpha1.LimitName("per-" + strings.ToLower(rl.unit.name)),
		FixedWindow: &ratelimitv1alpha1.WindowLimit{
			Limit:     ratelimitv1alpha1.Count(limit),
			Window:    ratelimitv1alpha1.Duration(rl.unit.window),
			Alignment: ratelimitv1alpha1.WindowAlignmentClock,
		},
	}}
	if n.shadow.on || n.quota.on {
		spec.Mode = ratelimitv1alpha1.ModeShadow
	}
	if n.quota.on {
		c.rs.Add(n.quota.pos, convert.Note, "quota_mode: written as mode: Shadow (counted, never denied, as there); Sluice does not list the violation in the response's dynamic metadata")
	}
	obj := &ratelimitv1alpha1.RateLimitPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: ratelimitv1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   c.opts.Namespace,
			Annotations: map[string]string{AnnotationSource: n.pos.String()},
		},
		Spec: spec,
	}
	if rl.name != "" {
		obj.Annotations[AnnotationName] = rl.name
	}
	c.policies = append(c.policies, Policy{Object: obj, Source: n.pos, Descriptor: strings.Join(desc, ", "), Note: note,
		nameParts: nameParts(d.name, path), id: identity(d.name, path)})
}

// sharedKey is the key template for a descriptor under a share_threshold
// wildcard: the values of the entries that still count, by key; the
// shared entries and exact values are the same for every descriptor the
// policy matches. "" (the default {descriptor}) without share_threshold.
func (c *converter) sharedKey(path []level) (string, bool) {
	shared := false
	for _, l := range path {
		shared = shared || l.shared
	}
	if !shared {
		return "", true
	}
	n := path[len(path)-1].n
	var parts []string
	seen := map[string]bool{}
	for _, l := range path {
		k := l.n.key
		dynamic := !l.shared && (l.n.value == "" || strings.HasSuffix(l.n.value, "*"))
		if dynamic {
			if seen[k] || strings.ContainsAny(k, "{}") {
				c.rs.Add(n.pos, convert.Inexact, "share_threshold: the bucket must be named by the value of entry '%s', which a key template cannot read (a key that repeats in the descriptor or holds braces); no policy, so these descriptors are not limited", k)
				return "", false
			}
			parts = append(parts, "{descriptor:"+k+"}")
		}
		seen[k] = true
	}
	if len(parts) == 0 {
		return "shared", true
	}
	key := strings.Join(parts, "/")
	if len(key) > maxTemplate {
		c.rs.Add(n.pos, convert.Inexact, "share_threshold: the key template is longer than %d bytes; no policy, so these descriptors are not limited", maxTemplate)
		return "", false
	}
	return key, true
}

// compile checks every policy with the compiler the check processes use:
// a failure is the converter's bug, reported as an error.
// A when over the check's CEL cost budget is dropped and reported, as one
// over its length bound is.
func (c *converter) compile() {
	for _, p := range c.policies {
		spec := &p.Object.Spec
		_, err := policy.Compile(p.Object.Namespace, p.Object.Name, spec)
		if err != nil && spec.Match.When != "" {
			without := *spec
			without.Match.When = ""
			if _, err2 := policy.Compile(p.Object.Namespace, p.Object.Name, &without); err2 == nil {
				c.rs.Add(p.Source, convert.Inexact, "the exclusions of this descriptor's more specific siblings do not compile as a match.when (%v); written without them, the policy also limits descriptors that envoyproxy/ratelimit gives to those siblings", err)
				spec.Match.When = ""
				continue
			}
		}
		if err != nil {
			c.rs.Add(p.Source, convert.Error, "the converted policy %s does not compile (a converter bug): %v", p.Object.Name, err)
		}
	}
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
