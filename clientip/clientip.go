// Package clientip finds the address of the client behind a request: the
// peer's, or, when the peer is a trusted proxy, the right-most untrusted
// address it forwarded. The check endpoint and the public middleware use
// it, so a {client_ip} key means the same behind either.
package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultTrustedProxies are the networks whose forwarded headers are
// believed by default: loopback and private ranges, where in-cluster
// ingress controllers and gateways live.
var DefaultTrustedProxies = []string{
	"127.0.0.0/8", "::1/128",
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
	"fc00::/7",
}

// Default returns the TrustedProxies of DefaultTrustedProxies.
func Default() *TrustedProxies {
	t, err := ParseTrustedProxies(DefaultTrustedProxies)
	if err != nil {
		panic("clientip: DefaultTrustedProxies: " + err.Error()) // constant input: any test catches it
	}
	return t
}

// TrustedProxies decides which peers' forwarded headers are believed.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies parses CIDRs (or single addresses).
func ParseTrustedProxies(cidrs []string) (*TrustedProxies, error) {
	t := &TrustedProxies{}
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: not an address or CIDR", c)
			}
			c = netip.PrefixFrom(a, a.BitLen()).String()
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", c, err)
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// Normalize is the form of a client address that policies key and match:
// an IPv4-mapped IPv6 address as IPv4, and no zone ("fe80::1%eth0" is
// fe80::1), since a zone names an interface of the host that wrote the
// address, not the client, and would otherwise make a bucket of its own.
func Normalize(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// Trusted reports whether a is a trusted proxy.
func (t *TrustedProxies) Trusted(a netip.Addr) bool {
	a = Normalize(a)
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP finds the original client's address. Forwarded headers are
// believed only when the peer is a trusted proxy; then X-Forwarded-For is
// walked from the right, past trusted proxies, and the first untrusted
// address is the client (anything to its left was written by the client
// and may be forged). X-Real-IP is used when there is no X-Forwarded-For.
// When every hop is trusted the left-most address is the client.
func (t *TrustedProxies) ClientIP(peer netip.Addr, xff []string, realIP string) netip.Addr {
	peer = Normalize(peer)
	if !peer.IsValid() || !t.Trusted(peer) {
		return peer
	}
	client := peer
	found := false
	for i := len(xff) - 1; i >= 0 && !found; i-- {
		list := xff[i]
		for list != "" && !found {
			var hop string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				hop, list = list[j+1:], list[:j]
			} else {
				hop, list = list, ""
			}
			a, ok := parseHop(hop)
			if !ok {
				// A trusted proxy forwarded something that is not an
				// address: stop at the last hop that is known.
				return client
			}
			client = a
			if !t.Trusted(a) {
				found = true
			}
		}
	}
	if len(xff) == 0 && realIP != "" {
		if a, ok := parseHop(realIP); ok {
			return a
		}
	}
	return client
}

// FromRequest is ClientIP for r: its peer (RemoteAddr), X-Forwarded-For
// and X-Real-IP. It allocates nothing.
func (t *TrustedProxies) FromRequest(r *http.Request) netip.Addr {
	// Indexed by canonical name: Header.Get would canonicalize every call.
	var realIP string
	if v := r.Header["X-Real-Ip"]; len(v) > 0 {
		realIP = v[0]
	}
	return t.ClientIP(Peer(r.RemoteAddr), r.Header["X-Forwarded-For"], realIP)
}

// Peer parses a connection's remote address: "host:port" as net/http
// sets it, or a bare address. It is the zero Addr when there is none.
func Peer(remoteAddr string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr()
	}
	if a, err := netip.ParseAddr(remoteAddr); err == nil {
		return a
	}
	return netip.Addr{}
}

// parseHop parses one X-Forwarded-For element: an address, possibly with a
// port or in brackets.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return Normalize(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return Normalize(ap.Addr()), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return Normalize(a), true
		}
	}
	return netip.Addr{}, false
}
