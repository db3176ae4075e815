package policy

import "testing"

// TestExplain gives each kind of mismatch its reason, and agrees with
// Match on every request.
func TestExplain(t *testing.T) {
	descriptor := &Request{Kind: KindDescriptor, Domain: "edge"}
	tests := []struct {
		match  string
		req    *Request
		reason string
	}{
		{"{}", req("GET", "h", "/"), ""},
		{"{hosts: [api.example.com]}", req("GET", "www.example.com", "/"), "host www.example.com matches none of spec.match.hosts"},
		{"{hosts: [api.example.com]}", req("GET", "", "/"), "host (none) matches none of spec.match.hosts"},
		{"{paths: ['/api/*']}", req("GET", "h", "/apis"), "path /apis matches none of spec.match.paths"},
		{"{methods: [POST]}", req("GET", "h", "/"), "method GET matches none of spec.match.methods"},
		{"{headers: [{name: a}, {name: authorization}]}", req("GET", "h", "/", "A", "1"), "header Authorization is absent (spec.match.headers[1])"},
		{"{headers: [{name: X-Plan, value: free}]}", req("GET", "h", "/", "X-Plan", "pro"), `header X-Plan is not "free" (spec.match.headers[0])`},
		{"{exemptClients: [203.0.113.0/24]}", req("GET", "h", "/"), "client 203.0.113.7 is in spec.match.exemptClients"},
		{`{when: 'request.method == "DELETE"'}`, req("GET", "h", "/"), "spec.match.when is false for this request"},
		{"{hosts: [h], methods: [GET]}", req("POST", "h", "/"), "method POST matches none of spec.match.methods"},
		{"{}", descriptor, "the policy matches HTTP requests, not rate limit service descriptors"},
		{"{domain: edge}", req("GET", "h", "/"), "the policy matches rate limit service descriptors (spec.match.domain, spec.match.descriptor), not HTTP requests"},
		{"{domain: other}", descriptor, `domain "edge" is not spec.match.domain "other"`},
		{"{domain: edge, descriptor: [{key: a}]}", descriptor, "the descriptor matches none of spec.match.descriptor's entries"},
	}
	for _, tt := range tests {
		p := mustCompile(t, "match: "+tt.match+"\n"+oneLimit)
		var e Eval
		e.Reset(tt.req)
		matched, reason, err := e.Explain(p)
		if err != nil {
			t.Fatalf("%s: %v", tt.match, err)
		}
		if reason != tt.reason || matched != (tt.reason == "") {
			t.Errorf("%s: %v %q, want %q", tt.match, matched, reason, tt.reason)
		}
		if m, _ := e.Match(p); m != matched {
			t.Errorf("%s: Match says %v, Explain %v", tt.match, m, matched)
		}
	}
}
