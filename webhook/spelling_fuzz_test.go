package webhook

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// FuzzNoSpellingSkipsAPolicy generates spellings of a request (host, path,
// method) and holds the endpoint to one rule: if any proxy's or router's
// reading of the request is in a policy's scope, the policy applies. The
// readings are written here independently of the endpoint: nginx's host
// (up to the first colon) and path (decoded, dot segments resolved), the
// host as a Go proxy keeps it (Traefik, Caddy), Go's ServeMux routing the
// path as sent (a typical backend), and the raw path prefix match of a
// router without normalization (Envoy's default).
func FuzzNoSpellingSkipsAPolicy(f *testing.F) {
	for _, s := range [][3]string{
		{"api.example.com", "/api/x", "GET"},
		{"api.example.com:1:2", "/login", "GET"},
		{"API.EXAMPLE.COM.", "/login", "POST"},
		{"api.example.com", "/api/x%2F..%2F..%2Fpub", "GET"},
		{"api.example.com", "/api/%2e%2e/pub", "GET"},
		{"api.example.com", "//api//x", "HEAD"},
		{"[::1]:80", "/api/x", "GET"},
		{"api.example.com:80:80", "/x/../login", "GET"},
		{"api.example.com", "/%6Cogin", "HEAD"},
		{"api.example.com", "/api%2fx", "GET"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	c := checktest.New(f, check.Options{Timeout: time.Second}, compile(f, "ns", "api", `
match: {hosts: [api.example.com], paths: ["/api/*", "/login"], methods: [GET, POST]}
key: global
limits: [{name: l, fixedWindow: {limit: 1, window: 24h}}]
`))
	s, err := New(Options{Checker: c})
	if err != nil {
		f.Fatal(err)
	}
	// Each request through both routes: net/http's, and the native route
	// as the check process's server reads the request. An allow by either
	// is held to the rule.
	send := func(t testing.TB, h map[string]string) int {
		r := httptest.NewRequest("GET", "/check/ns", nil)
		asIs := true
		for k, v := range h {
			r.Header[k] = []string{v}
			asIs = asIs && sentAsIs(v)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		native, ok := nativeStatus(t, s, "/check/ns", h)
		switch {
		case !ok:
		case asIs && native != w.Code:
			t.Fatalf("%q: native route %d, net/http %d", h, native, w.Code)
		case native == http.StatusOK:
			return native
		}
		return w.Code
	}
	if code, _ := nativeStatus(f, s, "/check/ns", map[string]string{"X-Original-Url": "http://api.example.com/login", "X-Original-Method": "GET"}); code != http.StatusOK {
		f.Fatalf("first request: %d", code) // exhausts the limit
	}

	backend := http.NewServeMux()
	for _, p := range []string{"GET /api/", "POST /api/", "GET /login", "POST /login"} {
		backend.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}

	f.Fuzz(func(t *testing.T, host, rawPath, method string) {
		if !strings.HasPrefix(rawPath, "/") || strings.ContainsAny(rawPath, "?#") {
			return // the fuzzer's query and fragment say nothing of the path
		}
		for name, h := range map[string]map[string]string{
			"nginx":       {"X-Original-Url": "http://" + host + rawPath, "X-Original-Method": method},
			"forwardauth": {"X-Forwarded-Host": host, "X-Forwarded-Uri": rawPath, "X-Forwarded-Method": method},
		} {
			code := send(t, h)
			switch code {
			case http.StatusForbidden, http.StatusTooManyRequests, http.StatusBadRequest:
				continue // applied, or refused: never an allow
			case http.StatusOK:
			default:
				t.Fatalf("%s: status %d", name, code)
			}
			if reading, ok := anyReadingInScope(backend, host, rawPath, method); ok {
				t.Fatalf("%s: host %q path %q method %q was allowed past the exhausted policy, though %s puts it in scope", name, host, rawPath, method, reading)
			}
		}
	})
}

// anyReadingInScope reports whether some proxy or router reads the request
// as one the policy covers (host api.example.com; /api/* or /login; GET,
// HEAD or POST), and which.
func anyReadingInScope(backend *http.ServeMux, host, rawPath, method string) (string, bool) {
	hostIn := false
	for _, h := range []string{nginxHost(host), goProxyHost(host)} {
		if h == "api.example.com" {
			hostIn = true
		}
	}
	if !hostIn {
		return "", false
	}
	methodIn := method == "GET" || method == "HEAD" || method == "POST"
	if !methodIn {
		return "", false
	}
	inPaths := func(p string) bool { return strings.HasPrefix(p, "/api/") || p == "/login" }
	if inPaths(rawPath) {
		return "the path as sent (Envoy)", true
	}
	if p, ok := nginxPath(rawPath); ok && inPaths(p) {
		return "nginx's path " + p, true
	}
	if u, err := url.ParseRequestURI(rawPath); err == nil {
		m := method
		if m == "HEAD" {
			m = "GET" // ServeMux's GET patterns take HEAD
		}
		r := &http.Request{Method: m, URL: u, Host: "api.example.com"}
		if _, pattern := backend.Handler(r); pattern != "" && !isRedirect(backend, r) {
			return "Go's ServeMux (" + pattern + ")", true
		}
	}
	return "", false
}

// isRedirect reports whether the mux answers r with a redirect to a
// cleaned path rather than routing it: the backend serves nothing then.
func isRedirect(mux *http.ServeMux, r *http.Request) bool {
	h, _ := mux.Handler(r)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code >= 300 && w.Code < 400
}

// nginxHost is the host nginx selects a server by (ngx_http_validate_host):
// up to the first colon, or a bracketed literal; one trailing dot dropped;
// lower case. "" where nginx answers 400 itself.
func nginxHost(h string) string {
	end := len(h)
	literal := strings.HasPrefix(h, "[")
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == ':' && !literal:
			if end == len(h) {
				end = i
			}
		case c == ']' && literal:
			literal, end = false, i+1
		case c == '/' || c == '\\' || c <= ' ' || c == 0x7f:
			return ""
		}
	}
	h = strings.TrimSuffix(h[:end], ".")
	if strings.Contains(h, "..") {
		return ""
	}
	return strings.ToLower(h)
}

// goProxyHost is the host a Go proxy (Traefik, Caddy) matches a route
// against: the Host without a port when it splits as host:port.
func goProxyHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// nginxPath is the path nginx matches locations against: decoded, then
// dot segments and repeated slashes resolved.
func nginxPath(raw string) (string, bool) {
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "", false
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c, true
}
