package envoyratelimit

import (
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

// compile checks every policy with the compiler the check processes use:
// a failure is the converter's bug, reported as an error.
// A when over the check's CEL cost budget is dropped and reported, as one
// over its length bound is.
func (c *converter) compile() {
	for _, p := range c.policies {
		spec := &p.Object.Spec
		_, err := policy.ValidateAndCompile(p.Object.Namespace, p.Object.Name, spec)
		if err != nil && spec.Match.When != "" {
			without := *spec
			without.Match.When = ""
			if _, err2 := policy.ValidateAndCompile(p.Object.Namespace, p.Object.Name, &without); err2 == nil {
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
