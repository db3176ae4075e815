package intake

import (
	"fmt"
	"strings"
)

// The syntax checks every way of asking (the HTTP profiles, the JSON check,
// ext_authz over gRPC) applies to the original request it is told about.

// validMethod reports whether m can be an HTTP method as nginx accepts
// one: upper-case letters, '-' and '_' (VERSION-CONTROL, M_SEARCH), at most
// 32. Methods are case-sensitive (RFC 9110), so "get" is not GET: every
// intake refuses it rather than guess, and none lets a spelling of a method
// skip a policy's methods.
func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; (c < 'A' || c > 'Z') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// checkMethod is validMethod with the reason every intake gives, after the
// name of the field or header the method came in.
func checkMethod(m string) error {
	if validMethod(m) {
		return nil
	}
	return fmt.Errorf("%q is not an HTTP method: want upper-case letters, '-' or '_' (methods are case-sensitive)", Excerpt(m))
}

// validURLText rejects control bytes and spaces, which no proxy forwards
// in a well-formed request line.
func validURLText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// validHeaderName reports whether s is an HTTP token (RFC 9110), as a
// header name must be.
func validHeaderName(s string) bool {
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
