package webhook

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/intake"
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

// detectProfile picks the profile from the headers when it is not fixed.
func detectProfile(fixed Profile, h http.Header) (Profile, error) {
	if fixed != ProfileAuto && fixed != "" {
		return fixed, nil
	}
	// Each proxy passes the client's own headers on beside the ones it
	// sets, so a client behind Traefik can send X-Original-URL and one
	// behind nginx X-Forwarded-Uri. Both kinds at once cannot be told
	// apart: refuse rather than let the client choose its reading.
	nginx := headerValue(h, "X-Original-Url") != ""
	forwardAuth := headerValue(h, "X-Forwarded-Uri") != "" || headerValue(h, "X-Forwarded-Method") != ""
	switch {
	case nginx && forwardAuth:
		return "", badHeader("X-Original-URL", "sent together with X-Forwarded-Uri or X-Forwarded-Method: the proxy cannot be told from its client; start the check endpoint with --profile nginx or --profile forwardauth")
	case nginx:
		return ProfileNginx, nil
	case forwardAuth:
		return ProfileForwardAuth, nil
	}
	return "", badHeader("X-Original-URL", "missing: the check endpoint needs the original request, as ingress-nginx auth-url (X-Original-URL, X-Original-Method) or ForwardAuth (X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-Host) send it")
}

// checkRequest is what the check routes read of a check request, from
// net/http's request or from fasthttp's.
type checkRequest struct {
	method, host string
	rawQuery     string      // the check URL's query, as sent
	header       http.Header // canonical names
	peer         netip.Addr
}

// originalRequest rebuilds the request the proxy is asking about into out.
// envoyRest is the original path and query for the Envoy profile (the part
// of the check URL after the namespace). It allocates nothing for a
// well-formed, already normalized request.
func originalRequest(profile Profile, r *checkRequest, envoyRest string, trusted *clientip.TrustedProxies, out *policy.Request) error {
	o := intake.Original{Header: r.header, Peer: r.peer}
	var err error
	switch profile {
	case ProfileNginx:
		err = nginxOriginal(r, &o)
	case ProfileForwardAuth:
		err = forwardAuthOriginal(r, &o)
	case ProfileEnvoy:
		// The original's method and Host, and its path and query after
		// the route's prefix.
		o.Method, o.Authority, o.Target = r.method, r.host, envoyRest
	default:
		return fmt.Errorf("unknown profile %q", profile)
	}
	if err != nil {
		return err
	}
	if err := intake.Read(&o, trusted, out); err != nil {
		f, _ := intake.FieldOf(err)
		return badHeader(profileFields[profile][f], "%v", err)
	}
	return nil
}

// nginxOriginal maps ingress-nginx's X-Original-URL and X-Original-Method
// onto o.
func nginxOriginal(r *checkRequest, o *intake.Original) error {
	raw := headerValue(r.header, "X-Original-Url")
	if raw == "" {
		return badHeader("X-Original-URL", "missing")
	}
	if o.Method = headerValue(r.header, "X-Original-Method"); o.Method == "" {
		return badHeader("X-Original-Method", "missing")
	}
	scheme, authority, rest, ok := splitAbsoluteURL(raw)
	if !ok {
		return badHeader("X-Original-URL", "not an absolute URL: %q", intake.Excerpt(raw))
	}
	if !validScheme(scheme) {
		return badHeader("X-Original-URL", "malformed URL: %q", intake.Excerpt(raw))
	}
	o.Authority, o.Target = authority, rest
	// X-Original-URL's host is the Host header ($http_host), but nginx
	// routes an absolute-form request by the host of its request line.
	// The auth-url can pass the host nginx routed by ($host).
	if h, ok := routedHost(r.rawQuery); ok {
		if h == "" {
			return badHeader("host", "the check URL's host parameter is empty")
		}
		o.Authority = h
	}
	return nil
}

// forwardAuthOriginal maps Traefik's and Caddy's X-Forwarded-Method,
// -Uri and -Host onto o.
func forwardAuthOriginal(r *checkRequest, o *intake.Original) error {
	if o.Method = headerValue(r.header, "X-Forwarded-Method"); o.Method == "" {
		return badHeader("X-Forwarded-Method", "missing")
	}
	if o.Target = headerValue(r.header, "X-Forwarded-Uri"); o.Target == "" {
		return badHeader("X-Forwarded-Uri", "missing")
	}
	if o.Authority = headerValue(r.header, "X-Forwarded-Host"); o.Authority == "" {
		return badHeader("X-Forwarded-Host", "missing")
	}
	return nil
}

// routedHost reads the host parameter of the check URL
// (/check/{namespace}?host=$host): the host nginx routed the request by.
// Its value is the rest of the query, taken as it is, since $host may hold
// '&', '=' or '%'; so host must be the last parameter.
func routedHost(checkQuery string) (string, bool) {
	for q := checkQuery; q != ""; {
		if v, ok := strings.CutPrefix(q, "host="); ok {
			return v, true
		}
		i := strings.IndexByte(q, '&')
		if i < 0 {
			break
		}
		q = q[i+1:]
	}
	return "", false
}

// headerValue is Header.Get for a name already in canonical form, which
// skips canonicalizing it on every request.
func headerValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// splitAbsoluteURL splits "scheme://authority/path?query" without
// allocating; userinfo is dropped from the authority.
func splitAbsoluteURL(raw string) (scheme, authority, rest string, ok bool) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return "", "", "", false
	}
	scheme, rest = raw[:i], raw[i+3:]
	j := strings.IndexAny(rest, "/?#")
	if j < 0 {
		authority, rest = rest, "/"
	} else {
		authority, rest = rest[:j], rest[j:]
	}
	if k := strings.LastIndexByte(authority, '@'); k >= 0 {
		authority = authority[k+1:]
	}
	if rest[0] != '/' {
		rest = "/" + rest
	}
	return scheme, authority, rest, authority != ""
}

func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// profileFields names, for each profile, the header (or part of the
// check request) that carries each field Read may refuse.
var profileFields = map[Profile]map[intake.Field]string{
	ProfileNginx:       {intake.FieldMethod: "X-Original-Method", intake.FieldHost: "X-Original-URL", intake.FieldTarget: "X-Original-URL"},
	ProfileForwardAuth: {intake.FieldMethod: "X-Forwarded-Method", intake.FieldHost: "X-Forwarded-Host", intake.FieldTarget: "X-Forwarded-Uri"},
	ProfileEnvoy:       {intake.FieldMethod: "method", intake.FieldHost: "Host", intake.FieldTarget: "path"},
}
