package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// TestHostileKeyValues sends key values no client should send: huge,
// binary, or full of the key encoding's own separators. Each must land in
// a bounded key inside its policy's own hash tag.
func TestHostileKeyValues(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{},
		compile(t, "ns", "per-user", "key: 'u:{header:X-User}'\nlimits: [{name: l, fixedWindow: {limit: 1000, window: 1h}}]"))
	values := map[string]string{
		"60 KiB":          strings.Repeat("a", 60<<10),
		"NUL and control": "al\x00ice\x01\x1f",
		"invalid UTF-8":   "\xff\xfe\xc3\x28",
		"braces":          "}{ns/other-policy/x}:l",
		"colons":          "::::",
		"percent":         "%7D%H%",
		"slashes":         "../../other/x",
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			body, _ := json.Marshal(CheckRequest{Namespace: "ns", DryRun: true,
				Request: OriginalRequest{Method: "GET", Path: "/", Headers: map[string]string{"X-User": v}, ClientIP: "192.0.2.1"}})
			resp, err := http.Post(ep.URL+"/v1/check", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out CheckResponse
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d err %v", resp.StatusCode, err)
			}
			key := out.Policies[0].Limits[0].RedisKey
			if len(key) > ratelimit.MaxKeyLen {
				t.Errorf("key of %d bytes, more than %d", len(key), ratelimit.MaxKeyLen)
			}
			if !strings.HasPrefix(key, "sluice:v2:{ns/per-user/") || !strings.HasSuffix(key, "}") || ratelimit.HashTag(key) != key[len("sluice:v2:{"):len(key)-1] {
				t.Errorf("key %q left its policy's tag", key)
			}
		})
	}
	// A 1 MiB header is at net/http's limit (MaxHeaderBytes 1 MiB plus
	// slack): it is either refused (431) or checked like any other value;
	// either way the endpoint keeps answering. (The check process's own
	// server refuses headers over httpserve.MaxHeaderBytes, 64 KiB, with
	// 431: TestBadRequestsNameTheHeader, and httpserve's tests.)
	netHTTP := serveNetHTTP(t, ep.server)
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"}
	h["X-User"] = strings.Repeat("b", 1<<20)
	if resp, _ := do(t, "GET", netHTTP+"/check/ns", h); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("1 MiB header: status %d, want 200 or 431", resp.StatusCode)
	}
	h["X-User"] = strings.Repeat("b", 2<<20)
	if resp, _ := do(t, "GET", netHTTP+"/check/ns", h); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("2 MiB header: status %d, want 431", resp.StatusCode)
	}
	h["X-User"] = "alice"
	for _, url := range []string{netHTTP, ep.URL} {
		if resp, _ := do(t, "GET", url+"/check/ns", h); resp.StatusCode != http.StatusOK {
			t.Fatalf("after the large headers: status %d", resp.StatusCode)
		}
	}
}

// FuzzNoRequestSkipsAPolicy: whatever URL and method a proxy forwards, a
// request the upstream would route under /admin/ is never allowed once the
// /admin limit is exhausted; a request the endpoint cannot read is a 400.
func FuzzNoRequestSkipsAPolicy(f *testing.F) {
	for _, s := range []string{"/admin/x", "//admin/x", "/x/../admin/", "/%61dmin/x", "/admin%2Fx", "/ADMIN/x", "/admin", "/./admin/./x?y#z", "/admin/\x00", "/%zz"} {
		f.Add(s, "GET")
	}
	c := checktest.New(f, check.Options{Timeout: time.Second},
		compile(f, "ns", "admin", "match: {paths: ['/admin/*']}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 24h}}]"))
	s, err := New(Options{Checker: c})
	if err != nil {
		f.Fatal(err)
	}
	// Each request through both routes: net/http's, and the native route
	// as the check process's server reads the request.
	call := func(t testing.TB, rawPath, method string) int {
		url := "http://example.com" + rawPath
		r := httptest.NewRequest("GET", "/check/ns", nil)
		r.Header["X-Original-Url"] = []string{url}
		r.Header["X-Original-Method"] = []string{method}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		native, ok := nativeStatus(t, s, "/check/ns", map[string]string{"X-Original-URL": url, "X-Original-Method": method})
		switch {
		case !ok:
		case sentAsIs(url) && sentAsIs(method) && native != w.Code:
			t.Fatalf("%q %q: native route %d, net/http %d", rawPath, method, native, w.Code)
		case native == http.StatusOK && w.Code != http.StatusOK:
			return native // held to the rule below
		}
		return w.Code
	}
	nativeStatus(f, s, "/check/ns", map[string]string{"X-Original-URL": "http://example.com/admin/first", "X-Original-Method": "GET"}) // exhaust the limit
	f.Fuzz(func(t *testing.T, rawPath, method string) {
		status := call(t, rawPath, method)
		switch status {
		case http.StatusOK, http.StatusForbidden, http.StatusBadRequest:
		default:
			t.Fatalf("status %d", status)
		}
		if status != http.StatusOK {
			return
		}
		u, err := url.Parse("http://example.com" + rawPath)
		if err != nil {
			return
		}
		// Route as an upstream would: dot segments and repeated slashes
		// resolved, a trailing slash kept.
		p := path.Clean("/" + u.Path)
		if strings.HasSuffix(u.Path, "/") && p != "/" {
			p += "/"
		}
		if strings.HasPrefix(p, "/admin/") {
			t.Fatalf("%q (routed as %q) was allowed past the exhausted /admin/* limit", rawPath, p)
		}
	})
}
