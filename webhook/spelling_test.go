package webhook

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// A policy for one host and the /api/ tree, exhausted after one request:
// any later request it applies to is denied.
const apiHostPolicy = `
match: {hosts: [api.example.com], paths: ["/api/*", "/login"]}
key: global
limits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]
`

// exhausted starts an endpoint with apiHostPolicy and spends its one
// request.
func exhausted(t *testing.T, opts Options) *endpoint {
	t.Helper()
	ep := newEndpoint(t, memstore.New().Backend(), opts, compile(t, "shop", "api", apiHostPolicy))
	first := map[string]string{"X-Original-URL": "http://api.example.com/api/first", "X-Original-Method": "GET"}
	if opts.Profile == ProfileForwardAuth {
		first = map[string]string{"X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": "/api/first", "X-Forwarded-Method": "GET"}
	}
	resp, _ := do(t, "GET", ep.URL+"/check/shop", first)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	return ep
}

// nginx routes "Host: api.example.com:1:2" to the api.example.com server
// (it reads the host up to the first colon), so the policy applies.
func TestHostIsReadAsNginxRoutesIt(t *testing.T) {
	ep := exhausted(t, Options{})
	for _, u := range []string{
		"http://api.example.com:1:2/login",
		"http://api.example.com:80:80/login",
		"http://API.Example.COM./login",
		"http://api.example.com:8443/login",
		"http://user@api.example.com/login",
	} {
		resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": u, "X-Original-Method": "GET"})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403 (the api.example.com policy): %s", u, resp.StatusCode, body)
		}
	}
	// A host nothing can be read from is refused, never allowed.
	for _, u := range []string{"http://[::1/login", "http://:80/login", "http://[/login"} {
		resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": u, "X-Original-Method": "GET"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "X-Original-URL") {
			t.Errorf("%s: status %d, want 400 naming X-Original-URL: %s", u, resp.StatusCode, body)
		}
	}
	resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Forwarded-Host": "api.example.com:1:2", "X-Forwarded-Uri": "/login", "X-Forwarded-Method": "GET"})
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("ForwardAuth host api.example.com:1:2: status %d, want 429: %s", resp.StatusCode, body)
	}
}

// "/api/x%2F..%2F..%2Fpub" is "/pub" once decoded and cleaned (nginx's
// reading), but under /api/ for routers that decode within a segment (Go's
// ServeMux): the /api/* policy applies.
func TestEncodedSlashesCannotSkipAPolicy(t *testing.T) {
	ep := exhausted(t, Options{})
	for _, p := range []string{
		"/api/x%2F..%2F..%2Fpub",
		"/api/x%2f..%2f..%2fpub",
		"/api%2F..%2Fpub/../api/y",
		"/api/%2e%2e/pub", // the path as sent starts with /api/ (Envoy routes the raw path)
	} {
		resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": "http://api.example.com" + p, "X-Original-Method": "GET"})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403 (the /api/* policy): %s", p, resp.StatusCode, body)
		}
	}
	// Paths no reading puts under /api/ stay out of the policy.
	for _, p := range []string{"/pub", "/apix/y", "/x/%2F/api"} {
		resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": "http://api.example.com" + p, "X-Original-Method": "GET"})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200 (no policy): %s", p, resp.StatusCode, body)
		}
	}
}

// nginx routes an absolute-form request ("GET http://api.example.com/login"
// with "Host: evil") by the request line's host, while ingress-nginx builds
// X-Original-URL from the Host header. The auth-url's host=$host parameter
// gives the host nginx routed by, and it wins.
func TestRoutedHostParameter(t *testing.T) {
	ep := exhausted(t, Options{})
	h := map[string]string{"X-Original-URL": "http://evil/login", "X-Original-Method": "POST"}
	if resp, body := do(t, "GET", ep.URL+"/check/shop?host=api.example.com", h); resp.StatusCode != http.StatusForbidden {
		t.Errorf("host=api.example.com: status %d, want 403: %s", resp.StatusCode, body)
	}
	// $host is taken whole, up to the end of the query: '&' in it does not
	// start another parameter.
	if resp, body := do(t, "GET", ep.URL+"/check/shop?x=1&host=API.example.com", h); resp.StatusCode != http.StatusForbidden {
		t.Errorf("host as the last of two parameters: status %d, want 403: %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", ep.URL+"/check/shop?host=a&b.example.com", h); resp.StatusCode != http.StatusOK {
		t.Errorf("host=a&b.example.com: status %d, want 200 (the whole value is the host): %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", ep.URL+"/check/shop?host=", h); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "host") {
		t.Errorf("empty host parameter: status %d, want 400 naming it: %s", resp.StatusCode, body)
	}
	// Without the parameter, X-Original-URL's host is the request's.
	if resp, body := do(t, "GET", ep.URL+"/check/shop", h); resp.StatusCode != http.StatusOK {
		t.Errorf("no host parameter: status %d, want 200 (host evil): %s", resp.StatusCode, body)
	}
}

// Behind Traefik or Caddy a client can add X-Original-URL (they pass the
// client's headers on), behind nginx X-Forwarded-Uri: both at once are
// refused, so the client cannot pick the profile that reads its own header.
func TestBothProfilesHeadersAreRefused(t *testing.T) {
	ep := exhausted(t, Options{})
	resp, body := do(t, "GET", ep.URL+"/check/shop", map[string]string{
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/login", "X-Forwarded-Host": "api.example.com",
		"X-Original-URL": "http://other.example.com/public", "X-Original-Method": "GET",
	})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "--profile") {
		t.Errorf("both kinds of headers: status %d, want 400 naming --profile: %s", resp.StatusCode, body)
	}
	// A fixed profile reads its own headers only.
	ep = exhausted(t, Options{Profile: ProfileForwardAuth})
	resp, body = do(t, "GET", ep.URL+"/check/shop", map[string]string{
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/login", "X-Forwarded-Host": "api.example.com",
		"X-Original-URL": "http://other.example.com/public", "X-Original-Method": "GET",
	})
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("--profile forwardauth: status %d, want 429: %s", resp.StatusCode, body)
	}
}

// A policy for GET covers HEAD, which backends answer with the GET
// handler.
func TestGetCoversHead(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "get", `
match: {methods: [GET]}
key: global
limits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]
`))
	codes := ""
	for _, m := range []string{"HEAD", "GET", "HEAD", "POST"} {
		resp, _ := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": "http://h/x", "X-Original-Method": m})
		codes += m + "=" + http.StatusText(resp.StatusCode) + " "
	}
	if want := "HEAD=OK GET=Forbidden HEAD=Forbidden POST=OK "; codes != want {
		t.Errorf("got %s, want %s", codes, want)
	}
}

// The Envoy route takes the original path as Envoy sent it and decodes it
// once: "%252e%252e" is the text "%2e%2e", not "..", and "//" or "/./"
// are cleaned, never answered with a redirect (which Envoy would hand to
// the client as the answer). Served by net/http and natively on fasthttp,
// as the check process serves it.
func TestEnvoyPathIsDecodedOnce(t *testing.T) {
	ep := exhausted(t, Options{})
	netHTTP := serveNetHTTP(t, ep.server)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for name, base := range map[string]string{"net/http": netHTTP, "fasthttp": ep.URL} {
		for _, p := range []string{"/api/%252e%252e/pub", "//api/items", "/api/./items", "/x/../api/items", "/api/items%3Fq", "/%61pi/items"} {
			req, _ := http.NewRequest("GET", base+"/envoy/shop"+p, nil)
			req.Host = "api.example.com"
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("%s: /envoy/shop%s: status %d, want 429 (the /api/* policy): %s", name, p, resp.StatusCode, body)
			}
		}
		for _, p := range []string{"/pub", "/api/x%2F..%2F..%2Fpub"} {
			req, _ := http.NewRequest("GET", base+"/envoy/shop"+p, nil)
			req.Host = "api.example.com"
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if p == "/pub" && resp.StatusCode != http.StatusOK {
				t.Errorf("%s: /envoy/shop%s: status %d, want 200", name, p, resp.StatusCode)
			}
			if p != "/pub" && resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("%s: /envoy/shop%s: status %d, want 429 (under /api/ within its segment)", name, p, resp.StatusCode)
			}
		}
		for _, p := range []string{"/envoy/", "/envoy/Shop/x", "/envoy/sh%6Fp/x"} {
			resp, err := noRedirect.Get(base + p)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %s: status %d, want 404 (no such namespace)", name, p, resp.StatusCode)
			}
		}
	}
}

// A JSON check is held to the bounds of the check routes (and of the
// `when` cost estimate): 16 KiB of URL, 64 KiB of headers.
func TestJSONCheckBounds(t *testing.T) {
	ep := exhausted(t, Options{})
	for name, c := range map[string]struct {
		body, field string
	}{
		"long path":    {`{"namespace":"shop","request":{"path":"/` + strings.Repeat("a", 16<<10) + `"}}`, "request.path"},
		"long headers": {`{"namespace":"shop","request":{"path":"/","headers":{"X-A":"` + strings.Repeat("a", 40<<10) + `","X-B":"` + strings.Repeat("b", 40<<10) + `"}}}`, "request.headers"},
		"bad host":     {`{"namespace":"shop","request":{"path":"/","host":"[::1"}}`, "request.host"},
	} {
		resp, err := http.Post(ep.URL+"/v1/check", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), c.field) {
			t.Errorf("%s: status %d, want 400 naming %s: %.200s", name, resp.StatusCode, c.field, body)
		}
	}
}
