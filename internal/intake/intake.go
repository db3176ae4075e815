// Package intake reads the original request a transport describes into
// the policy.Request that policies decide, by one set of rules for every
// transport: the HTTP check endpoint's proxy profiles, POST /v1/check,
// ext_authz over gRPC and the public middleware. A transport maps its own
// fields (headers, JSON fields, attributes) onto an Original; Read reads
// the method, host, path readings, query and client address, and refuses
// what cannot be read with an Error that names the field, which the
// transport names in its own terms. No spelling of a request may read one
// way through one transport and another way through the next: the
// differential test beside this package sends one table of spellings
// through all of them.
package intake

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Original is the original request as a transport describes it, every
// field as sent.
type Original struct {
	// Method is the request method: upper-case letters, '-' and '_'.
	Method string
	// Authority is the host the request was sent to, with any port.
	Authority string
	// HostOptional makes an empty Authority a request without a host,
	// which host-scoped policies do not apply to, rather than an error
	// (POST /v1/check, whose callers may not know the host).
	HostOptional bool
	// Target is the path, query and any fragment.
	Target string
	// Header has canonical names and is a section of at most
	// policy.MaxHeaderBytes: the check endpoint's servers refuse larger
	// ones, a transport that lists its headers builds the section with
	// HeaderSection, and one whose server may allow more checks it with
	// CheckHeaderSection.
	Header http.Header
	// Peer is the address the request came from. Forwarded headers
	// (X-Forwarded-For, X-Real-IP) are believed only when it is a trusted
	// proxy.
	Peer netip.Addr
}

// Field is a part of an original request that a reading refused.
// Transports name it as their callers spell it: a header, a JSON field,
// an attribute.
type Field int

const (
	FieldMethod Field = iota
	FieldHost
	// FieldTarget is the path and query, bounded with the host.
	FieldTarget
	FieldHeaders
	FieldClientAddress
)

// Error is a part of an original request that cannot be read. It is
// answered with 400 (431 for ErrHeadersTooLarge), never with an allow:
// an unreadable request must not skip the policies that would read it.
type Error struct {
	Field Field
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

func fieldError(f Field, format string, args ...any) *Error {
	return &Error{Field: f, Err: fmt.Errorf(format, args...)}
}

// Read reads o into out. Forwarded headers are believed from the peers
// in trusted; with nil, from none (a caller that names the client's
// address itself). It allocates nothing for a well-formed, already
// normalized request.
func Read(o *Original, trusted *clientip.TrustedProxies, out *policy.Request) error {
	*out = policy.Request{Method: o.Method, Header: o.Header}
	if err := checkMethod(o.Method); err != nil {
		return &Error{Field: FieldMethod, Err: err}
	}
	if len(o.Authority)+len(o.Target) > policy.MaxURLBytes {
		return fieldError(FieldTarget, "longer than %d bytes with the host", policy.MaxURLBytes)
	}
	if o.Authority != "" || !o.HostOptional {
		var err error
		if out.Host, err = readHost(o.Authority); err != nil {
			return &Error{Field: FieldHost, Err: err}
		}
	}
	if err := readTarget(out, o.Target); err != nil {
		return &Error{Field: FieldTarget, Err: err}
	}
	out.ClientIP = clientAddress(o, trusted)
	return nil
}

// clientAddress is the client's address: the peer's, or the one a
// trusted peer forwarded (clientip's rule).
func clientAddress(o *Original, trusted *clientip.TrustedProxies) netip.Addr {
	if trusted == nil {
		return clientip.Normalize(o.Peer)
	}
	var realIP string
	if v := o.Header["X-Real-Ip"]; len(v) > 0 {
		realIP = v[0]
	}
	return trusted.ClientIP(o.Peer, o.Header["X-Forwarded-For"], realIP)
}

// ReadAddress reads an address a transport names as text (ext_authz's
// source address, POST /v1/check's clientIP) as a Peer.
func ReadAddress(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fieldError(FieldClientAddress, "%q is not an IP address", Excerpt(s))
	}
	return clientip.Normalize(a), nil
}

// ErrHeadersTooLarge is the Err of a header section over
// policy.MaxHeaderBytes.
var ErrHeadersTooLarge = fmt.Errorf("more than %d bytes", policy.MaxHeaderBytes)

// HeaderSection builds the header section of a transport that lists it
// line by line (POST /v1/check's object, ext_authz's maps) as an HTTP
// server reads one: names are HTTP tokens, kept in canonical form,
// repeated lines in order, and the section is at most
// policy.MaxHeaderBytes (names, values and 4 bytes a line).
type HeaderSection struct {
	Header http.Header
	size   int
}

// Add adds one line. An HTTP/2 pseudo-header (":path") counts towards the
// section, as on the wire, and is no header.
func (s *HeaderSection) Add(name, value string) error {
	if s.size += lineSize(name, value); s.size > policy.MaxHeaderBytes {
		return &Error{Field: FieldHeaders, Err: ErrHeadersTooLarge}
	}
	if len(name) > 0 && name[0] == ':' {
		return nil
	}
	if !validHeaderName(name) {
		return fieldError(FieldHeaders, "%q is not an HTTP header name", Excerpt(name))
	}
	if s.Header == nil {
		s.Header = http.Header{}
	}
	k := http.CanonicalHeaderKey(name)
	s.Header[k] = append(s.Header[k], value)
	return nil
}

// CheckHeaderSection refuses a header section over policy.MaxHeaderBytes
// that a server of another's (the middleware's) read.
func CheckHeaderSection(h http.Header) error {
	size := 0
	for k, vs := range h {
		for _, v := range vs {
			size += lineSize(k, v)
		}
	}
	if size > policy.MaxHeaderBytes {
		return &Error{Field: FieldHeaders, Err: ErrHeadersTooLarge}
	}
	return nil
}

// lineSize is what one header line takes: name, value, ": " and CRLF.
func lineSize(name, value string) int { return len(name) + len(value) + 4 }

// FieldOf is the field err names, and whether it is an intake Error.
func FieldOf(err error) (Field, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Field, true
	}
	return 0, false
}
