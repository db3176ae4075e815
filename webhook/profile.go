package webhook

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Profile is how a proxy describes the original request to the check
// endpoint.
type Profile string

const (
	// ProfileAuto detects the profile from the headers.
	ProfileAuto Profile = "auto"
	// ProfileNginx is ingress-nginx `auth-url` (nginx auth_request):
	// X-Original-URL, X-Original-Method, X-Real-IP, X-Forwarded-For.
	ProfileNginx Profile = "nginx"
	// ProfileForwardAuth is Traefik ForwardAuth and Caddy forward_auth:
	// X-Forwarded-Method, -Proto, -Host, -Uri, -For.
	ProfileForwardAuth Profile = "forwardauth"
	// ProfileEnvoy is Envoy ext_authz over HTTP: the original path follows
	// the configured path prefix; method and Host are the original's.
	ProfileEnvoy Profile = "envoy"
)

// ParseProfile parses a --profile flag value.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(strings.ToLower(s)); p {
	case ProfileAuto, ProfileNginx, ProfileForwardAuth, ProfileEnvoy:
		return p, nil
	case "traefik", "caddy":
		return ProfileForwardAuth, nil
	}
	return "", fmt.Errorf("unknown profile %q: want auto, nginx, forwardauth (traefik, caddy) or envoy", s)
}

// RequestError is a problem with the headers a proxy sent; it names the
// header. The endpoint answers it with 400, never with an allow.
type RequestError struct {
	Header string
	Reason string
}

func (e *RequestError) Error() string { return e.Header + ": " + e.Reason }

func badHeader(h, format string, args ...any) error {
	return &RequestError{Header: h, Reason: fmt.Sprintf(format, args...)}
}

// maxURLLength bounds the original URL a proxy may describe; longer ones
// are refused with 400 rather than processed.
const maxURLLength = 16 << 10

// detectProfile picks the profile from the headers when it is not fixed.
func detectProfile(fixed Profile, r *http.Request) (Profile, error) {
	if fixed != ProfileAuto && fixed != "" {
		return fixed, nil
	}
	switch {
	case r.Header.Get("X-Original-URL") != "":
		return ProfileNginx, nil
	case r.Header.Get("X-Forwarded-Uri") != "" || r.Header.Get("X-Forwarded-Method") != "":
		return ProfileForwardAuth, nil
	}
	return "", badHeader("X-Original-URL", "missing: the check endpoint needs the original request, as ingress-nginx auth-url (X-Original-URL, X-Original-Method) or ForwardAuth (X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-Host) send it")
}

// originalRequest rebuilds the request the proxy is asking about.
// envoyPath is the original path for the Envoy profile (the part of the
// check URL after the namespace).
func originalRequest(profile Profile, r *http.Request, envoyPath string, trusted *TrustedProxies) (*policy.Request, error) {
	out := &policy.Request{Header: r.Header}
	var rawURL string
	switch profile {
	case ProfileNginx:
		rawURL = r.Header.Get("X-Original-URL")
		if rawURL == "" {
			return nil, badHeader("X-Original-URL", "missing")
		}
		out.Method = r.Header.Get("X-Original-Method")
		if out.Method == "" {
			return nil, badHeader("X-Original-Method", "missing")
		}
	case ProfileForwardAuth:
		out.Method = r.Header.Get("X-Forwarded-Method")
		if out.Method == "" {
			return nil, badHeader("X-Forwarded-Method", "missing")
		}
		uri := r.Header.Get("X-Forwarded-Uri")
		if uri == "" {
			return nil, badHeader("X-Forwarded-Uri", "missing")
		}
		host := r.Header.Get("X-Forwarded-Host")
		if host == "" {
			return nil, badHeader("X-Forwarded-Host", "missing")
		}
		if !strings.HasPrefix(uri, "/") {
			return nil, badHeader("X-Forwarded-Uri", "must start with '/'")
		}
		rawURL = "http://" + host + uri
	case ProfileEnvoy:
		out.Method = r.Method
		rawURL = "http://" + r.Host + envoyPath
		if r.URL.RawQuery != "" {
			rawURL += "?" + r.URL.RawQuery
		}
	default:
		return nil, fmt.Errorf("unknown profile %q", profile)
	}
	if len(rawURL) > maxURLLength {
		return nil, badHeader(urlHeader(profile), "longer than %d bytes", maxURLLength)
	}
	if !validMethod(out.Method) {
		return nil, badHeader(methodHeader(profile), "%q is not an HTTP method", truncate(out.Method))
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, badHeader(urlHeader(profile), "not an absolute URL: %q", truncate(rawURL))
	}
	out.Host = normalizeHost(u.Host)
	if out.Host == "" {
		return nil, badHeader(urlHeader(profile), "no host in %q", truncate(rawURL))
	}
	p, err := normalizePath(u.EscapedPath())
	if err != nil {
		return nil, badHeader(urlHeader(profile), "%v", err)
	}
	out.Path = p
	out.RawQuery = u.RawQuery

	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	out.ClientIP = trusted.ClientIP(peer.Addr(), r.Header.Values("X-Forwarded-For"), r.Header.Get("X-Real-IP"))
	return out, nil
}

func urlHeader(p Profile) string {
	switch p {
	case ProfileForwardAuth:
		return "X-Forwarded-Uri"
	case ProfileEnvoy:
		return "path"
	}
	return "X-Original-URL"
}

func methodHeader(p Profile) string {
	switch p {
	case ProfileForwardAuth:
		return "X-Forwarded-Method"
	case ProfileEnvoy:
		return "method"
	}
	return "X-Original-Method"
}

func validMethod(m string) bool {
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

// normalizeHost lower-cases the host and drops the port.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// normalizePath decodes percent-escapes and resolves "." and ".." segments
// and repeated slashes, so "/a/../login", "//login" and "/%6Cogin" match a
// policy for "/login" the way the upstream application will route them.
// A trailing slash is kept.
func normalizePath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	decoded, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("malformed percent-encoding in the path")
	}
	if !strings.HasPrefix(decoded, "/") {
		decoded = "/" + decoded
	}
	cleaned := path.Clean(decoded)
	if strings.HasSuffix(decoded, "/") && cleaned != "/" {
		cleaned += "/"
	}
	return cleaned, nil
}

func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
