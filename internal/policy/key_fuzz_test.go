package policy

import (
	"net/http"
	"testing"
)

// FuzzKeyRenderingIsInjective checks that two requests with different
// placeholder values never share a bucket, whatever bytes they send.
func FuzzKeyRenderingIsInjective(f *testing.F) {
	f.Add("x:y", "z", "x", "y:z")
	f.Add("a", "bc", "ab", "c")
	f.Add("%3A", "", ":", "")
	f.Add("\x1f", "a", "", "\x1fa")
	f.Add("{", "}", "{}", "")
	templates := []string{
		"{header:A}:{header:B}",
		"{header:A}{header:B}",
		"u={header:A}&v={header:B}/",
		"{header:A}%{header:B}",
	}
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		if a1 == a2 && b1 == b2 {
			return
		}
		for _, src := range templates {
			tmpl, err := parseKeyTemplate(src)
			if err != nil {
				t.Fatalf("parse %q: %v", src, err)
			}
			r1 := &Request{Header: http.Header{"A": {a1}, "B": {b1}}}
			r2 := &Request{Header: http.Header{"A": {a2}, "B": {b2}}}
			k1, _ := tmpl.render(nil, r1)
			k2, _ := tmpl.render(nil, r2)
			if string(k1) == string(k2) {
				t.Fatalf("template %q renders (%q,%q) and (%q,%q) both as %q", src, a1, b1, a2, b2, k1)
			}
		}
	})
}

// FuzzParseKeyTemplate checks that any template either fails with an error
// or renders without panicking.
func FuzzParseKeyTemplate(f *testing.F) {
	for _, s := range []string{"{client_ip}", "{client_ip/24}", "{header:X}-{query:q}", "{", "}", "{}", "{client_ip/0}", "{query:}", "a{method}b{host}c{path}"} {
		f.Add(s)
	}
	f.Fuzz(func(_ *testing.T, src string) {
		tmpl, err := parseKeyTemplate(src)
		if err != nil {
			return
		}
		r := &Request{Method: "GET", Host: "h", Path: "/p", RawQuery: "q=1", Header: http.Header{"X": {"v"}}}
		tmpl.render(nil, r)
	})
}
