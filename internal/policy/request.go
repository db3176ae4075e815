// Package policy compiles a RateLimitPolicy spec into a runnable policy: a
// matcher, a key template and the limits in the engine's terms. The local
// mode, the controller and the check endpoint all use it, so a policy means
// the same thing wherever it runs.
package policy

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Request is one request the policies decide, of one Kind: the original
// HTTP request a proxy asks about, as an intake read it (header keys
// canonical, as net/http stores them), or one descriptor of an Envoy rate
// limit service request.
type Request struct {
	Kind Kind

	// The HTTP attributes (KindHTTP).
	Method string
	Host   string // without port, lower case
	// Path is the path percent-decoded, with dot segments and repeated
	// slashes resolved, without the query: keys and `when` see it.
	Path string
	// AltPaths are other readings of the same target that some router
	// takes ("" when unused): spec.match.paths matches when Path or any of
	// them does, so no spelling skips a policy (package intake reads them).
	AltPaths [5]string
	RawQuery string
	Header   http.Header
	ClientIP netip.Addr

	// The descriptor and its domain (KindDescriptor).
	Domain     string
	Descriptor []DescriptorEntry
	// Unordered says that the descriptor is a bucket id of Envoy's rate
	// limit quota service (NewBucket): a map, whose entries match a
	// policy's by key whatever their order.
	Unordered bool
}

// NewBucket is the descriptor of a rate limit quota service bucket id in
// domain: its entries sorted by key (the order a policy that names no
// entry counts them in), matched by key (Request.Unordered).
func NewBucket(domain string, id map[string]string) *Request {
	r := &Request{Kind: KindDescriptor, Domain: domain, Unordered: true, Descriptor: make([]DescriptorEntry, 0, len(id))}
	for k, v := range id {
		r.Descriptor = append(r.Descriptor, DescriptorEntry{Key: k, Value: v})
	}
	slices.SortFunc(r.Descriptor, func(a, b DescriptorEntry) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// Kind is what a Request describes.
type Kind uint8

const (
	// KindHTTP is an HTTP request (the zero Kind): only HTTP policies
	// match it.
	KindHTTP Kind = iota
	// KindDescriptor is one descriptor of an Envoy rate limit service
	// request, which has no HTTP attributes: only descriptor policies
	// match it.
	KindDescriptor
)

// DescriptorEntry is one entry of an Envoy rate limit descriptor.
type DescriptorEntry struct {
	Key, Value string
}

// Lookup returns the value of the descriptor's first entry with key.
func (r *Request) Lookup(key string) (string, bool) {
	for i := range r.Descriptor {
		if r.Descriptor[i].Key == key {
			return r.Descriptor[i].Value, true
		}
	}
	return "", false
}
