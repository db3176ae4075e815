package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// matcher is a compiled spec.match. Each list is an OR of its entries; the
// lists combine with AND; an empty list matches everything.
type matcher struct {
	exactHosts   []string // lower case
	hostSuffixes []string // ".example.com" for "*.example.com"
	exactPaths   []string
	pathPrefixes []string
	methods      []string
	headers      []headerMatch
	when         *whenExpr

	// forDescriptors is set for a descriptor policy, which matches only
	// descriptors of Envoy rate limit service requests; other policies
	// match only HTTP requests.
	forDescriptors bool
	domain         string // "": any domain
	descriptor     []entryMatch
	anyDescriptor  bool // no descriptor entries named: every descriptor matches

	// exempt are client networks the policy never applies to.
	exempt []netip.Prefix

	// routes, for a policy with targetRefs, are its targets' routing:
	// the request must be one a target receives.
	routes *compiledRoutes
}

// entryMatch is one compiled descriptor entry.
type entryMatch struct {
	key    string
	value  string // exact value, or the prefix when prefix is set
	prefix bool
	any    bool
}

type headerMatch struct {
	name     string // canonical
	value    string
	anyValue bool
}

func compileMatch(m *ratelimitv1alpha1.RequestMatch) matcher {
	var c matcher
	for _, h := range m.Hosts {
		host := strings.ToLower(string(h))
		if suffix, ok := strings.CutPrefix(host, "*"); ok {
			c.hostSuffixes = append(c.hostSuffixes, suffix)
		} else {
			c.exactHosts = append(c.exactHosts, host)
		}
	}
	for _, p := range m.Paths {
		if prefix, ok := strings.CutSuffix(string(p), "*"); ok {
			c.pathPrefixes = append(c.pathPrefixes, prefix)
		} else {
			c.exactPaths = append(c.exactPaths, string(p))
		}
	}
	for _, method := range m.Methods {
		c.methods = append(c.methods, string(method))
	}
	// GET covers HEAD, as nginx's limit_except does: most backends answer
	// HEAD with the GET handler, so a HEAD flood must not pass a GET limit.
	if slices.Contains(c.methods, http.MethodGet) && !slices.Contains(c.methods, http.MethodHead) {
		c.methods = append(c.methods, http.MethodHead)
	}
	for _, h := range m.Headers {
		hm := headerMatch{name: http.CanonicalHeaderKey(string(h.Name)), anyValue: h.Value == nil}
		if h.Value != nil {
			hm.value = *h.Value
		}
		c.headers = append(c.headers, hm)
	}
	c.forDescriptors = m.Domain != "" || len(m.Descriptor) > 0
	c.domain = m.Domain
	c.anyDescriptor = len(m.Descriptor) == 0
	for _, e := range m.Descriptor {
		em := entryMatch{key: e.Key, any: e.Value == nil}
		if e.Value != nil {
			em.value, em.prefix = strings.CutSuffix(*e.Value, "*")
		}
		c.descriptor = append(c.descriptor, em)
	}
	return c
}

// matches reports whether r is in scope. The CEL expression runs last: it
// is the most expensive test.
func (m *matcher) matches(r *Request, vars *requestVars) (bool, error) {
	if m.mismatch(r).part != failedNone {
		return false, nil
	}
	if m.when == nil {
		return true, nil
	}
	return m.when.eval(vars)
}

// matchPart names the part of a matcher that a request failed.
type matchPart uint8

const (
	failedNone matchPart = iota
	failedKind
	failedDomain
	failedDescriptor
	failedHost
	failedPath
	failedMethod
	failedHeader
	failedExempt
	failedRoutes
)

// mismatchOf is the first part of a matcher that a request fails (failedNone:
// all but `when`, which matches evaluates apart), and for a header the
// index of the header match that failed.
type mismatchOf struct {
	part   matchPart
	header int
}

// mismatch tests every part but `when`, in the order matches decides by.
func (m *matcher) mismatch(r *Request) mismatchOf {
	if m.forDescriptors != (r.Kind == KindDescriptor) {
		return mismatchOf{part: failedKind}
	}
	if m.forDescriptors {
		switch {
		case m.domain != "" && m.domain != r.Domain:
			return mismatchOf{part: failedDomain}
		case !m.matchesDescriptor(r):
			return mismatchOf{part: failedDescriptor}
		}
		return mismatchOf{}
	}
	switch {
	case !m.matchesHost(r.Host):
		return mismatchOf{part: failedHost}
	case !m.matchesAnyPath(r):
		return mismatchOf{part: failedPath}
	case !m.matchesMethod(r.Method):
		return mismatchOf{part: failedMethod}
	}
	if i := m.failedHeader(r.Header); i >= 0 {
		return mismatchOf{part: failedHeader, header: i}
	}
	switch {
	case m.exempts(r.ClientIP):
		return mismatchOf{part: failedExempt}
	case m.routes != nil && !m.routes.matches(r):
		return mismatchOf{part: failedRoutes}
	}
	return mismatchOf{}
}

// exempts reports whether ip is in one of the exempt networks.
func (m *matcher) exempts(ip netip.Addr) bool {
	if len(m.exempt) == 0 || !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	for _, p := range m.exempt {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parseClientNetwork reads a CIDR or a single address as a network.
func parseClientNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("must be a network in CIDR notation such as 10.0.0.0/8, or an IP address")
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// matchesDescriptor reports whether r's descriptor matches (its domain
// is mismatch's to test): the descriptor has exactly the named entries, in
// order, as Envoy's ratelimit service walks its nested configuration.
func (m *matcher) matchesDescriptor(r *Request) bool {
	if m.anyDescriptor {
		return true
	}
	if len(r.Descriptor) != len(m.descriptor) {
		return false
	}
	for i := range m.descriptor {
		want := &m.descriptor[i]
		var value string
		if r.Unordered {
			// A bucket id's entries are a map: found by key (each key
			// once, so equal lengths mean the same keys).
			v, found := r.Lookup(want.key)
			if !found {
				return false
			}
			value = v
		} else {
			if want.key != r.Descriptor[i].Key {
				return false
			}
			value = r.Descriptor[i].Value
		}
		if !want.matchesValue(value) {
			return false
		}
	}
	return true
}

func (e *entryMatch) matchesValue(v string) bool {
	switch {
	case e.any:
		return true
	case e.prefix:
		return strings.HasPrefix(v, e.value)
	default:
		return e.value == v
	}
}

// inOrder appends to dst the entries of r, a bucket id the matcher
// matched, in the order the matcher names them: the order of the rate
// limit service descriptor that counts in the same bucket.
func (m *matcher) inOrder(dst []DescriptorEntry, r *Request) []DescriptorEntry {
	for i := range m.descriptor {
		v, _ := r.Lookup(m.descriptor[i].key)
		dst = append(dst, DescriptorEntry{Key: m.descriptor[i].key, Value: v})
	}
	return dst
}

func (m *matcher) matchesHost(host string) bool {
	if len(m.exactHosts) == 0 && len(m.hostSuffixes) == 0 {
		return true
	}
	for _, h := range m.exactHosts {
		if h == host {
			return true
		}
	}
	for _, s := range m.hostSuffixes {
		// "*.example.com" needs at least one label before the suffix.
		if len(host) > len(s) && strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// matchesAnyPath reports whether any reading of the request's path
// matches.
func (m *matcher) matchesAnyPath(r *Request) bool {
	if m.matchesPath(r.Path) {
		return true
	}
	for _, p := range r.AltPaths {
		if p != "" && m.matchesPath(p) {
			return true
		}
	}
	return false
}

func (m *matcher) matchesPath(path string) bool {
	if len(m.exactPaths) == 0 && len(m.pathPrefixes) == 0 {
		return true
	}
	for _, p := range m.exactPaths {
		if p == path {
			return true
		}
	}
	for _, p := range m.pathPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func (m *matcher) matchesMethod(method string) bool {
	if len(m.methods) == 0 {
		return true
	}
	for _, want := range m.methods {
		if want == method {
			return true
		}
	}
	return false
}

// failedHeader returns the index of the first header match h fails, or -1.
func (m *matcher) failedHeader(h http.Header) int {
	for i, want := range m.headers {
		values, ok := h[want.name]
		if !ok || len(values) == 0 {
			return i
		}
		if !want.anyValue && !containsString(values, want.value) {
			return i
		}
	}
	return -1
}

func containsString(values []string, v string) bool {
	for _, s := range values {
		if s == v {
			return true
		}
	}
	return false
}
