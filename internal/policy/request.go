// Package policy compiles a RateLimitPolicy spec into a runnable policy: a
// matcher, a key template and the limits in the engine's terms. The local
// mode, the controller and the check endpoint all use it, so a policy means
// the same thing wherever it runs.
package policy

import (
	"net/http"
	"net/netip"
)

// Request is the original request a proxy asks about, as the check endpoint
// rebuilt it. Header keys are canonical (as net/http stores them).
type Request struct {
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

	// Domain and Descriptor are set for one descriptor of an Envoy rate
	// limit service request, and only then: such a request has no HTTP
	// attributes, and only descriptor policies match it.
	Domain     string
	Descriptor []DescriptorEntry
}

// DescriptorEntry is one entry of an Envoy rate limit descriptor.
type DescriptorEntry struct {
	Key, Value string
}

// IsDescriptor reports whether r is a descriptor of an Envoy rate limit
// service request rather than an HTTP request.
func (r *Request) IsDescriptor() bool { return r.Domain != "" }

// Lookup returns the value of the descriptor's first entry with key.
func (r *Request) Lookup(key string) (string, bool) {
	for i := range r.Descriptor {
		if r.Descriptor[i].Key == key {
			return r.Descriptor[i].Value, true
		}
	}
	return "", false
}
