package intake

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readHost reads the host of an authority as Read does: bytes a
// Host header may carry (httpguts.ValidHostHeader, as net/http's server
// checks them: no control bytes, spaces or raw UTF-8, which an IDN sends
// as punycode), read by NormalizeHost. An authority nothing can be read
// from, empty included, is an error: an unreadable host must never skip a
// host-scoped policy.
func readHost(authority string) (string, error) {
	if !httpguts.ValidHostHeader(authority) {
		return "", fmt.Errorf("malformed host %q", Excerpt(authority))
	}
	h := NormalizeHost(authority)
	if h == "" {
		return "", fmt.Errorf("no host in %q", Excerpt(authority))
	}
	return h, nil
}

// NormalizeHost reads the host of an authority (a Host header, the host of
// X-Original-URL) the way nginx selects a server by it: a bracketed IPv6
// literal up to its ']', otherwise the text before the first ':', so that
// "api.example.com:1:2" is api.example.com, as nginx routes it. One trailing
// dot is dropped and the result is lower case. An authority nothing can be
// read from (empty, an unclosed '[') gives "", which callers refuse: an
// unreadable host must never skip a host-scoped policy.
//
// It allocates only when it must lower-case.
func NormalizeHost(h string) string {
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return ""
		}
		h = h[1:end]
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// Unrebindable reports whether name, a NormalizeHost result, is one no
// DNS rebinding can give another site: "localhost" or an IP address. A
// server on loopback that authenticates nobody answers to these alone
// (and to the names it is told), so that another site's page, its name
// made to resolve to 127.0.0.1, reaches nothing.
func Unrebindable(name string) bool {
	if name == "localhost" {
		return true
	}
	_, err := netip.ParseAddr(name)
	return err == nil
}
