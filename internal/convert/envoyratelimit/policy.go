package envoyratelimit

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

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
	match, desc, ok := c.descriptorMatch(d, path)
	if !ok {
		return
	}
	key, ok := c.sharedKey(path)
	if !ok {
		return
	}
	spec := ratelimitv1alpha1.RateLimitPolicySpec{Match: match, Key: key, FailureMode: c.opts.FailureMode}
	note := c.setLimit(&spec, rl)
	c.setMode(&spec, n)
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

// setMode writes shadow_mode as spec.mode Shadow, and quota_mode (over
// shadow_mode) as the limit's own mode Soft: let through when over, and
// flagged, as the peer flags it. A limit of 0 in quota mode stays a
// shadow policy: it denies by onMissingKey, which follows spec.mode.
func (c *converter) setMode(spec *ratelimitv1alpha1.RateLimitPolicySpec, n *node) {
	switch {
	case n.quota.on && n.rateLimit.requestsPerUnit == 0:
		spec.Mode = ratelimitv1alpha1.ModeShadow
		c.rs.Add(n.quota.pos, convert.Inexact, "quota_mode with requests_per_unit: 0: written as mode: Shadow (never denied, as there), without the flag a soft limit gives: a limit of 0 has no bucket to be over")
	case n.quota.on:
		spec.Limits[0].Mode = ratelimitv1alpha1.LimitModeSoft
		c.rs.Add(n.quota.pos, convert.Note, "quota_mode: written as the limit's mode: Soft (counted, never denied, as there); where envoyproxy/ratelimit lists the violation in the response's dynamic metadata, Sluice hands the upstream X-Sluice-Over-Limit naming the limit")
	case n.shadow.on:
		spec.Mode = ratelimitv1alpha1.ModeShadow
	}
}

// descriptorMatch is the match of the descriptors path leads to, with
// each entry described for the comment above the policy ("key=value", or
// the key alone); false, reported, when a policy cannot hold it.
func (c *converter) descriptorMatch(d *domain, path []level) (ratelimitv1alpha1.RequestMatch, []string, bool) {
	n := path[len(path)-1].n
	match := ratelimitv1alpha1.RequestMatch{Domain: d.name}
	if len(path) > maxEntries {
		c.rs.Add(n.pos, convert.Inexact, "a descriptor of %d entries: a policy matches at most %d; no policy, so these descriptors are not limited", len(path), maxEntries)
		return match, nil, false
	}
	if len(d.name) > maxDomainBytes {
		c.rs.Add(n.pos, convert.Inexact, "domain '%s' is longer than %d bytes, match.domain's bound; no policy, so these descriptors are not limited", d.name, maxDomainBytes)
		return match, nil, false
	}
	var conds []string
	var desc []string
	for _, l := range path {
		e := ratelimitv1alpha1.DescriptorEntryMatch{Key: l.n.key}
		if len(l.n.key) > maxKeyBytes || len(l.n.value) > maxValueBytes {
			c.rs.Add(n.pos, convert.Inexact, "entry '%s' exceeds a policy's bounds (keys of %d bytes, values of %d); no policy, so these descriptors are not limited", l.n.key, maxKeyBytes, maxValueBytes)
			return match, nil, false
		}
		if l.n.value != "" {
			v := l.n.value
			e.Value = &v
			desc = append(desc, l.n.key+"="+v)
		} else {
			desc = append(desc, l.n.key)
		}
		match.Descriptor = append(match.Descriptor, e)
		conds = append(conds, l.conds...)
	}
	match.When = strings.Join(conds, " && ")
	if len(match.When) > maxWhenBytes {
		c.rs.Add(n.pos, convert.Inexact, "the exclusions of this descriptor's more specific siblings need a match.when of %d bytes, over its bound of %d; written without them, the policy also limits descriptors that envoyproxy/ratelimit gives to those siblings", len(match.When), maxWhenBytes)
		match.When = ""
	}
	return match, desc, true
}

// setLimit writes rl into spec as its one limit, a fixed window aligned
// to the clock. It returns a note for the comment above the policy ("" for
// none).
func (c *converter) setLimit(spec *ratelimitv1alpha1.RateLimitPolicySpec, rl *rateLimit) (note string) {
	limit := int64(rl.requestsPerUnit)
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
	return note
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
