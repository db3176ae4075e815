// Package policy compiles a RateLimitPolicy spec into a runnable policy: a
// matcher, a key template and the limits in the engine's terms. The local
// mode, the controller and the check endpoint all use it, so a policy means
// the same thing wherever it runs.
package policy

import (
	"net/http"
	"net/netip"
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
