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
	Method   string
	Host     string // without port, lower case
	Path     string // without the query
	RawQuery string
	Header   http.Header
	ClientIP netip.Addr
}
