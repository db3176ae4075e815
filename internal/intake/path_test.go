package intake

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

func TestNormalizePath(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/a": "/a", "/a/": "/a/", "//a": "/a", "/a/./b": "/a/b", "/a/../b": "/b",
		"/%61": "/a", "/a%2Fb": "/a/b", "/..": "/", "/a/.": "/a", "/a//b/": "/a/b/",
	} {
		got, err := normalizePath(in)
		if err != nil || got != want {
			t.Errorf("normalizePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := normalizePath("/%zz"); err == nil {
		t.Error("malformed escape accepted")
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM": "example.com", "example.com:8080": "example.com", "example.com.": "example.com",
		"[2001:db8::1]:443": "2001:db8::1", "10.0.0.1:80": "10.0.0.1",
		// As nginx selects a server: the text before the first colon.
		"api.example.com:1:2": "api.example.com", "API.example.com:80:80": "api.example.com", "2001:db8::1": "2001",
		// Nothing to read: refused by the callers.
		"[::1": "", "": "", ":80": "", "[": "",
	} {
		if got := NormalizeHost(in); got != want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadPath(t *testing.T) {
	type alt = [len(policy.Request{}.AltPaths)]string
	for _, c := range []struct {
		escaped string
		path    string
		alt     alt
	}{
		{"/api/items", "/api/items", alt{}},
		{"", "/", alt{}},
		{"/", "/", alt{}},
		{"//api/items", "/api/items", alt{"//api/items"}},
		{"/%61pi/x", "/api/x", alt{"/%61pi/x"}},
		// nginx: "/pub"; Go's ServeMux: under /api/; Envoy: the text as sent.
		{"/api/x%2F..%2F..%2Fpub", "/pub", alt{"/api/x%2F..%2F..%2Fpub"}},
		{"/api/x%2f..%2F../pub", "/pub", alt{"/api/x%2f..%2F../pub", "/api/x%2F..%2F../pub"}},
		{"/a%2Fb/../c", "/a/c", alt{"/a%2Fb/../c", "/c"}},
		{"/api/%2e%2e/pub", "/pub", alt{"/api/%2e%2e/pub"}},
		// Express, Spring 5 and Rails route a trailing slash to the path without it.
		{"/login/", "/login/", alt{"/login"}},
		{"//login//", "/login/", alt{"//login//", "/login"}},
		// Servlet containers drop path parameters before they route.
		{"/login;jsessionid=x", "/login;jsessionid=x", alt{"/login"}},
		{"/login/;jsessionid=x", "/login/;jsessionid=x", alt{"/login/", "/login"}},
		{"/a;x=1/b;y=2", "/a;x=1/b;y=2", alt{"/a/b"}},
		{"/pub/..;/admin", "/pub/..;/admin", alt{"/admin"}},
		{"/a%3Bb;c/d", "/a;b;c/d", alt{"/a%3Bb;c/d", "/a;b/d"}},
		{"/;x", "/;x", alt{"/"}},
	} {
		var r policy.Request
		if err := readPath(&r, c.escaped); err != nil {
			t.Fatalf("readPath(%q): %v", c.escaped, err)
		}
		if r.Path != c.path || r.AltPaths != c.alt {
			t.Errorf("readPath(%q) = %q %q, want %q %q", c.escaped, r.Path, r.AltPaths, c.path, c.alt)
		}
	}
	if err := readPath(new(policy.Request), "/a%2"); err == nil {
		t.Error("malformed escape accepted")
	}
}

func TestReadPathAllocations(t *testing.T) {
	var r policy.Request
	if n := testing.AllocsPerRun(100, func() { _ = readPath(&r, "/api/items/42") }); n != 0 {
		t.Errorf("a clean path: %v allocations, want 0", n)
	}
}
