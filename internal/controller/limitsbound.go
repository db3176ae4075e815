package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
)

// limitsBound is a namespace's worst case: the most limits one request
// can meet among its policies, compared with the most one check evaluates
// (ratelimit.MaxEntries). A request over it is refused at check time
// (check.ErrTooManyLimits); here its policies are told at apply time.
//
// Only specs are read, and of match only what tells policies apart
// exactly and cheaply, so each figure is an upper bound; limits of one
// bucket met twice count once in a check.
//
//   - An HTTP request is checked against every HTTP policy of its
//     namespace. Policies whose match.hosts share no host never match
//     one request; paths, methods, headers and when are not compared. The worst case is the most limits the policies that can
//     match one host have together.
//   - An Envoy rate limit service request carries at most check.MaxParts
//     (64) descriptors of one domain, each checked against the descriptor
//     policies. A policy with match.domain matches only that domain, one
//     with match.descriptor only descriptors of exactly those keys in that
//     order, so policies that differ in a set domain or in their keys never
//     match one descriptor. The worst case is 64 × the most limits the
//     policies that can match one descriptor have together.
type limitsBound struct {
	// policies are the namespace's, as read.
	policies []ratelimitv1alpha1.RateLimitPolicy
	bound    int
	http     hostBound
	// byClass sums the descriptor policies of each class.
	byClass map[descriptorClass]tally
	// worst is, for each class of policy, the descriptor with the most
	// limits among the descriptors a policy of that class can match.
	worst map[descriptorClass]worstDescriptor
}

// hostBound sums HTTP policies by the hosts they match.
type hostBound struct {
	anyHost tally
	// exact and under sum the policies of each exact host and of each
	// wildcard's suffix (".example.com" for "*.example.com").
	exact, under map[string]tally
	// worstExact and worstUnder are, for a policy of that host or
	// wildcard, the host with the most limits it can match; worst is the
	// host with the most of all.
	worstExact, worstUnder map[string]worstHost
	worst                  worstHost
}

// worstHost is a host and the policies able to match it: a host named
// exactly, "\x00" + suffix for a host under a wildcard that no policy
// names exactly, "\x00" for a host no policy names.
type worstHost struct {
	host string
	tally
}

// tally counts policies and their limits.
type tally struct{ policies, limits int }

func (t tally) plus(u tally) tally { return tally{t.policies + u.policies, t.limits + u.limits} }

// descriptorClass is what a descriptor policy's match says of the
// descriptors it matches: their domain and their keys in order (joined by
// NUL); "" for any.
type descriptorClass struct{ domain, keys string }

// worstDescriptor is a descriptor (an example of its class) and the
// policies able to match it.
type worstDescriptor struct {
	descriptorClass
	tally
}

// newLimitsBound reads the worst case of a namespace's policies.
func newLimitsBound(policies []ratelimitv1alpha1.RateLimitPolicy, bound int) *limitsBound {
	b := &limitsBound{policies: policies, bound: bound, byClass: map[descriptorClass]tally{}, worst: map[descriptorClass]worstDescriptor{},
		http: hostBound{exact: map[string]tally{}, under: map[string]tally{}, worstExact: map[string]worstHost{}, worstUnder: map[string]worstHost{}}}
	for i := range policies {
		p := &policies[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		t := tally{policies: 1, limits: len(p.Spec.Limits)}
		if c, ok := classOf(p); ok {
			b.byClass[c] = b.byClass[c].plus(t)
		} else {
			b.http.add(p, t)
		}
	}
	b.http.rank()
	b.rankDescriptors()
	return b
}

// hostsOf are the exact hosts and wildcard suffixes p matches, none of
// them covered by another (so a host matches one of them at most); false
// when p matches every host (no match.hosts, or targetRefs, whose routes
// are not read here).
func hostsOf(p *ratelimitv1alpha1.RateLimitPolicy) (exact, under []string, ok bool) {
	if len(p.Spec.Match.Hosts) == 0 || len(p.Spec.TargetRefs) > 0 {
		return nil, nil, false
	}
	for _, h := range p.Spec.Match.Hosts {
		host := strings.ToLower(string(h)) // as internal/policy reads them
		if suffix, ok := strings.CutPrefix(host, "*"); ok {
			under = append(under, suffix)
		} else {
			exact = append(exact, host)
		}
	}
	covered := func(host string, self int) bool {
		for i, s := range under {
			if i != self && len(host) > len(s) && strings.HasSuffix(host, s) {
				return true
			}
		}
		return false
	}
	exact = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(exact))), func(h string) bool { return covered(h, -1) })
	under = slices.Compact(slices.Sorted(slices.Values(under)))
	kept := under[:0:0]
	for i, s := range under {
		if !covered(s, i) { // ".b.example.com" is under ".example.com"
			kept = append(kept, s)
		}
	}
	return exact, kept, true
}

func (h *hostBound) add(p *ratelimitv1alpha1.RateLimitPolicy, t tally) {
	exact, under, ok := hostsOf(p)
	if !ok {
		h.anyHost = h.anyHost.plus(t)
		return
	}
	for _, e := range exact {
		h.exact[e] = h.exact[e].plus(t)
	}
	for _, s := range under {
		h.under[s] = h.under[s].plus(t)
	}
}

// rank fills the worst hosts. The hosts worth trying are those named
// exactly, one under each wildcard that no policy names exactly, and one
// no policy names: any other host meets no more (the wildcards covering a
// host are suffixes of one another, so a host under the narrowest of them
// meets them all).
func (h *hostBound) rank() {
	h.try("\x00")
	for e := range h.exact {
		h.try(e)
	}
	for s := range h.under {
		h.try("\x00" + s)
	}
}

// try counts the policies that match host and records it for every exact
// host and wildcard that matches it.
func (h *hostBound) try(host string) {
	t := h.anyHost.plus(h.exact[host])
	suffixes := func(yield func(string) bool) {
		for i := 1; i < len(host); i++ {
			if host[i] == '.' && !yield(host[i:]) {
				return
			}
		}
	}
	for s := range suffixes {
		t = t.plus(h.under[s])
	}
	w := worstHost{host, t}
	h.worst = w.over(h.worst)
	if _, ok := h.exact[host]; ok {
		h.worstExact[host] = w.over(h.worstExact[host])
	}
	for s := range suffixes {
		if _, ok := h.under[s]; ok {
			h.worstUnder[s] = w.over(h.worstUnder[s])
		}
	}
}

// over is the worse of w and than (more limits, then the first by name, so
// that a message names the same host at every reconcile).
func (w worstHost) over(than worstHost) worstHost {
	if than.host == "" || w.limits > than.limits || (w.limits == than.limits && w.host < than.host) {
		return w
	}
	return than
}

// of is the worst host p can match.
func (h *hostBound) of(p *ratelimitv1alpha1.RateLimitPolicy) worstHost {
	exact, under, ok := hostsOf(p)
	if !ok {
		return h.worst
	}
	var w worstHost
	for _, e := range exact {
		w = h.worstExact[e].over(w)
	}
	for _, s := range under {
		w = h.worstUnder[s].over(w)
	}
	return w
}

// describe names host for a message.
func (w worstHost) describe() string {
	switch {
	case w.host == "\x00":
		return "any host"
	case strings.HasPrefix(w.host, "\x00"):
		return "a host under *" + w.host[1:]
	default:
		return "host " + w.host
	}
}

// classOf is p's descriptor class; false for an HTTP policy.
func classOf(p *ratelimitv1alpha1.RateLimitPolicy) (descriptorClass, bool) {
	m := &p.Spec.Match
	if m.Domain == "" && len(m.Descriptor) == 0 {
		return descriptorClass{}, false
	}
	var keys strings.Builder
	for _, e := range m.Descriptor {
		keys.WriteString(e.Key) // at least one byte: keys never read ""
		keys.WriteByte(0)
	}
	return descriptorClass{domain: m.Domain, keys: keys.String()}, true
}

// rankDescriptors fills worst. The descriptors worth trying are, beside
// those of classes naming both a domain and keys, each named domain with
// the keys whose any-domain policies have the most limits, each named key
// sequence with the domain whose any-keys policies have the most, and
// those two together: any other descriptor meets no more. Linear in the
// number of classes.
func (b *limitsBound) rankDescriptors() {
	// A named domain with any keys, and any domain with named keys.
	var topDomain, topKeys worstDescriptor
	for c, t := range b.byClass {
		switch {
		case c.domain != "" && c.keys == "" && (topDomain.domain == "" || better(t.limits, c, topDomain.limits, topDomain.descriptorClass)):
			topDomain = worstDescriptor{c, t}
		case c.domain == "" && c.keys != "" && (topKeys.keys == "" || better(t.limits, c, topKeys.limits, topKeys.descriptorClass)):
			topKeys = worstDescriptor{c, t}
		}
	}
	b.try(descriptorClass{topDomain.domain, topKeys.keys})
	for c := range b.byClass {
		switch {
		case c.domain != "" && c.keys != "":
			b.try(c)
		case c.domain != "":
			b.try(descriptorClass{c.domain, topKeys.keys})
		case c.keys != "":
			b.try(descriptorClass{topDomain.domain, c.keys})
		}
	}
}

// better orders candidates: more limits first, then by name, so that a
// message names the same descriptor at every reconcile.
func better(limits int, c descriptorClass, thanLimits int, than descriptorClass) bool {
	if limits != thanLimits {
		return limits > thanLimits
	}
	return cmp.Or(cmp.Compare(c.domain, than.domain), cmp.Compare(c.keys, than.keys)) < 0
}

// try counts the policies that match a descriptor of class d (d naming
// a domain and keys, or "" for ones no policy names) and records it for
// every class of policy that matches it.
func (b *limitsBound) try(d descriptorClass) {
	matching := []descriptorClass{{}}
	if d.domain != "" {
		matching = append(matching, descriptorClass{domain: d.domain})
	}
	if d.keys != "" {
		matching = append(matching, descriptorClass{keys: d.keys})
	}
	if d.domain != "" && d.keys != "" {
		matching = append(matching, d)
	}
	var t tally
	for _, c := range matching {
		t = t.plus(b.byClass[c])
	}
	for _, c := range matching {
		if w, seen := b.worst[c]; !seen || better(t.limits, d, w.limits, w.descriptorClass) {
			b.worst[c] = worstDescriptor{d, t}
		}
	}
}

// of says whether p can take part in a request over the bound, and if so
// why (a condition reason and message).
func (b *limitsBound) of(p *ratelimitv1alpha1.RateLimitPolicy) (over bool, reason, msg string) {
	c, ok := classOf(p)
	if !ok {
		w := b.http.of(p)
		if w.limits <= b.bound {
			return false, "", ""
		}
		return true, ratelimitv1alpha1.ReasonHTTPPoliciesOverBound, fmt.Sprintf(
			"A request to %s can match %d HTTP policies of this namespace with %d limits together (this one among them), more than the %d one check evaluates, "+
				"as far as their hosts tell (paths, methods, headers and when are not compared). "+
				"A request that meets more than %d is answered 400 too-many-limits (ext_authz: INVALID_ARGUMENT) and counted nowhere; "+
				"this policy stays in force for every other request. "+
				"Give policies match.hosts so that fewer of them match one host, or merge policies into fewer limits; "+
				"narrower paths, methods, headers or when keep requests under the bound too, but do not clear this condition.",
			w.describe(), w.policies, w.limits, b.bound, b.bound)
	}
	w := b.worst[c]
	if check.MaxParts*w.limits <= b.bound {
		return false, "", ""
	}
	domain, keys := "any domain", "any keys"
	if w.domain != "" {
		domain = "domain " + w.domain
	}
	if w.keys != "" {
		keys = "the keys [" + strings.ReplaceAll(strings.TrimSuffix(w.keys, "\x00"), "\x00", ", ") + "]"
	}
	return true, ratelimitv1alpha1.ReasonDescriptorPoliciesOverBound, fmt.Sprintf(
		"A rate limit service request of %s carries up to %d descriptors, and a descriptor with %s can match %d descriptor policies of this namespace with %d limits together (this one among them): "+
			"up to %d × %d = %d limits in one check, more than the %d one check evaluates. "+
			"A request that meets more than %d is answered INVALID_ARGUMENT and counted nowhere; this policy stays in force for every other request. "+
			"Set match.domain or match.descriptor so that fewer policies match one descriptor, or merge policies into fewer limits.",
		domain, check.MaxParts, keys, w.policies, w.limits,
		check.MaxParts, w.limits, check.MaxParts*w.limits, b.bound, b.bound)
}
