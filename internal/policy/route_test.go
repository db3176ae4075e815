package policy

import (
	"net/netip"
	"strings"
	"testing"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func prefix(v string) RoutePathMatch { return RoutePathMatch{Type: PathPrefix, Value: v} }
func exact(v string) RoutePathMatch  { return RoutePathMatch{Type: PathExact, Value: v} }

// targeted compiles a policy targeting one route whose routing is table.
func targeted(t *testing.T, table ...RouteEntry) *Policy {
	t.Helper()
	spec := ratelimitv1alpha1.RateLimitPolicySpec{
		TargetRefs: []gatewayv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{
			Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "target"}}},
		Limits: []ratelimitv1alpha1.Limit{{Name: "l", FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1m"}}},
	}
	p, err := CompileTargeted("ns", "p", &spec, &Routes{Tables: []RouteTable{{Gateway: "gw/edge", Entries: table}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoutePrecedence(t *testing.T) {
	tests := []struct {
		name  string
		table []RouteEntry
		req   *Request
		want  bool
	}{
		{"prefix matches element by element", []RouteEntry{{Path: prefix("/api"), Targeted: true}}, req("GET", "h", "/api/x"), true},
		{"prefix matches itself", []RouteEntry{{Path: prefix("/api/"), Targeted: true}}, req("GET", "h", "/api"), true},
		{"prefix is not a string prefix", []RouteEntry{{Path: prefix("/api"), Targeted: true}}, req("GET", "h", "/apis"), false},
		{"a longer prefix of another route wins", []RouteEntry{{Path: prefix("/api"), Targeted: true, Order: 0}, {Path: prefix("/api/admin"), Order: 1}},
			req("GET", "h", "/api/admin/users"), false},
		{"the targeted route keeps the rest", []RouteEntry{{Path: prefix("/api"), Targeted: true, Order: 0}, {Path: prefix("/api/admin"), Order: 1}},
			req("GET", "h", "/api/orders"), true},
		{"exact beats prefix", []RouteEntry{{Path: prefix("/login"), Targeted: true}, {Path: exact("/login"), Order: 1}}, req("POST", "h", "/login"), false},
		{"a method match beats none", []RouteEntry{{Path: prefix("/"), Targeted: true}, {Path: prefix("/"), Method: "POST", Order: 1}}, req("POST", "h", "/x"), false},
		{"a method match is exact", []RouteEntry{{Path: prefix("/"), Method: "GET", Targeted: true}, {Path: prefix("/"), Order: 1}}, req("HEAD", "h", "/x"), false},
		{"more header matches win", []RouteEntry{{Path: prefix("/"), Targeted: true},
			{Path: prefix("/"), Headers: []RouteValueMatch{{Name: "x-canary", Value: "1"}}, Order: 1}}, req("GET", "h", "/", "X-Canary", "1"), false},
		{"a header match that fails leaves the request", []RouteEntry{{Path: prefix("/"), Targeted: true},
			{Path: prefix("/"), Headers: []RouteValueMatch{{Name: "x-canary", Value: "1"}}, Order: 1}}, req("GET", "h", "/", "X-Canary", "0"), true},
		{"query parameters", []RouteEntry{{Path: prefix("/"), QueryParams: []RouteValueMatch{{Type: MatchRegularExpression, Name: "v", Value: "[0-9]+"}}, Targeted: true}},
			req("GET", "h", "/?v=42"), true},
		{"ties go to the lower order", []RouteEntry{{Path: prefix("/a"), Order: 0}, {Path: prefix("/a"), Targeted: true, Order: 1}}, req("GET", "h", "/a"), false},
		{"an exact hostname beats a wildcard", []RouteEntry{{Hostnames: []string{"*.example.com"}, Path: prefix("/"), Targeted: true},
			{Hostnames: []string{"api.example.com"}, Path: prefix("/"), Order: 1}}, req("GET", "api.example.com", "/x"), false},
		{"the wildcard keeps other hosts", []RouteEntry{{Hostnames: []string{"*.example.com"}, Path: prefix("/"), Targeted: true},
			{Hostnames: []string{"api.example.com"}, Path: prefix("/"), Order: 1}}, req("GET", "www.example.com", "/x"), true},
		{"hostname before path", []RouteEntry{{Hostnames: []string{"api.example.com"}, Path: prefix("/"), Targeted: true},
			{Path: exact("/x"), Order: 1}}, req("GET", "api.example.com", "/x"), true},
		{"another host", []RouteEntry{{Hostnames: []string{"api.example.com"}, Path: prefix("/"), Targeted: true}}, req("GET", "www.example.com", "/"), false},
		{"a regular expression path", []RouteEntry{{Path: RoutePathMatch{Type: PathRegularExpression, Value: "/v[0-9]+/.*"}, Targeted: true}}, req("GET", "h", "/v2/x"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := targeted(t, tt.table...)
			var e Eval
			e.Reset(tt.req)
			got, err := e.Match(p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

// Any reading of the path that the targeted route receives applies the
// policy: a spelling that one router reads into the target cannot skip it.
func TestRouteMatchesEveryReadingOfThePath(t *testing.T) {
	p := targeted(t, RouteEntry{Path: prefix("/api"), Targeted: true}, RouteEntry{Path: prefix("/"), Order: 1})
	r := req("GET", "h", "/pub")
	r.AltPaths[0] = "/api/x%2F..%2F..%2Fpub"
	var e Eval
	e.Reset(r)
	if got, _ := e.Match(p); !got {
		t.Error("a reading under /api did not apply the policy")
	}
}

func TestTargetRefsNeedResolvedRoutes(t *testing.T) {
	_, err := compileYAML("targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\n" + oneLimit)
	if err == nil || !containsAll(err.Error(), "spec.targetRefs", "local mode") {
		t.Errorf("error = %v", err)
	}
	_, err = compileYAML("targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\nmatch: {paths: [/x]}\n" + oneLimit)
	if err == nil || !containsAll(err.Error(), "spec.match", "takes its hosts, paths and methods from its targets") {
		t.Errorf("error = %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestExemptClients(t *testing.T) {
	p := mustCompile(t, "match: {exemptClients: [10.0.0.0/8, '192.0.2.7', '2001:db8::/32']}\n"+oneLimit)
	for ip, want := range map[string]bool{
		"10.1.2.3": false, "192.0.2.7": false, "192.0.2.8": true, "2001:db8:1::1": false, "2001:db9::1": true, "::ffff:10.0.0.1": false,
	} {
		r := req("GET", "h", "/")
		r.ClientIP = netip.MustParseAddr(ip)
		var e Eval
		e.Reset(r)
		if got, _ := e.Match(p); got != want {
			t.Errorf("%s: match %v, want %v", ip, got, want)
		}
	}
	if _, err := compileYAML("match: {exemptClients: [10.0.0.0/33]}\n" + oneLimit); err == nil || !strings.Contains(err.Error(), "spec.match.exemptClients[0]") {
		t.Errorf("bad network: %v", err)
	}
}
