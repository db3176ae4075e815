package checkhttp

import "strings"

// The syntax checks every way of asking (the HTTP profiles, the JSON check,
// ext_authz over gRPC) applies to the original request it is told about.

// ValidMethod reports whether m can be an HTTP method as proxies forward
// it: upper-case letters, at most 32.
func ValidMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// ValidURLText rejects control bytes and spaces, which no proxy forwards
// in a well-formed request line.
func ValidURLText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// ValidHeaderName reports whether s is an HTTP token (RFC 9110), as a
// header name must be.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Excerpt shortens a value quoted in an error message.
func Excerpt(s string) string {
	const most = 64
	if len(s) > most {
		return s[:most] + "..."
	}
	return s
}
