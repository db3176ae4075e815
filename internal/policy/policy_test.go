package policy

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func mustCompile(t *testing.T, specYAML string) *Policy {
	t.Helper()
	p, err := compileYAML(specYAML)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return p
}

func compileYAML(specYAML string) (*Policy, error) {
	var spec ratelimitv1alpha1.RateLimitPolicySpec
	if err := yaml.UnmarshalStrict([]byte(specYAML), &spec); err != nil {
		return nil, err
	}
	return ValidateAndCompile("shop", "p", &spec) // as the middleware compiles: every rule in Go
}

const oneLimit = "limits: [{name: l, fixedWindow: {limit: 10, window: 1m}}]\n"

func req(method, host, path string, headers ...string) *Request {
	r := &Request{Method: method, Host: host, Path: path, Header: http.Header{}, ClientIP: netip.MustParseAddr("203.0.113.7")}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		r.Path, r.RawQuery = path[:i], path[i+1:]
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name  string
		match string
		req   *Request
		want  bool
	}{
		{"empty match selects everything", "{}", req("GET", "a.example.com", "/x"), true},
		{"exact host", "{hosts: [api.example.com]}", req("GET", "api.example.com", "/"), true},
		{"exact host, other host", "{hosts: [api.example.com]}", req("GET", "www.example.com", "/"), false},
		{"wildcard host, subdomain", "{hosts: ['*.example.com']}", req("GET", "a.b.example.com", "/"), true},
		{"wildcard host, apex", "{hosts: ['*.example.com']}", req("GET", "example.com", "/"), false},
		{"wildcard host, lookalike", "{hosts: ['*.example.com']}", req("GET", "badexample.com", "/"), false},
		{"host is case-insensitive in the spec", "{hosts: [API.Example.com]}", req("GET", "api.example.com", "/"), true},
		{"exact path", "{paths: [/login]}", req("POST", "h", "/login"), true},
		{"exact path, longer", "{paths: [/login]}", req("POST", "h", "/login/x"), false},
		{"prefix path", "{paths: ['/api/*']}", req("GET", "h", "/api/v1/users"), true},
		{"prefix path, the prefix itself", "{paths: ['/api/*']}", req("GET", "h", "/api/"), true},
		{"prefix path, sibling", "{paths: ['/api/*']}", req("GET", "h", "/apis"), false},
		{"method", "{methods: [POST, PUT]}", req("PUT", "h", "/"), true},
		{"method, other", "{methods: [POST, PUT]}", req("GET", "h", "/"), false},
		{"header present", "{headers: [{name: authorization}]}", req("GET", "h", "/", "Authorization", "Bearer x"), true},
		{"header absent", "{headers: [{name: authorization}]}", req("GET", "h", "/"), false},
		{"header value", "{headers: [{name: X-Plan, value: free}]}", req("GET", "h", "/", "X-Plan", "free"), true},
		{"header other value", "{headers: [{name: X-Plan, value: free}]}", req("GET", "h", "/", "X-Plan", "pro"), false},
		{"header second value", "{headers: [{name: X-Plan, value: free}]}", req("GET", "h", "/", "X-Plan", "pro", "X-Plan", "free"), true},
		{"fields combine with AND", "{hosts: [h], methods: [GET]}", req("POST", "h", "/"), false},
		{"when over headers", `{when: 'request.headers["x-plan"] == "free"'}`, req("GET", "h", "/", "X-Plan", "free"), true},
		{"when over query", `{when: 'request.query["debug"] == "1"'}`, req("GET", "h", "/x?debug=1&a=b"), true},
		{"when over client_ip", `{when: 'request.client_ip.startsWith("203.0.113.")'}`, req("GET", "h", "/"), true},
		{"when false", `{when: 'request.method == "DELETE"'}`, req("GET", "h", "/"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, "match: "+tt.match+"\n"+oneLimit)
			var e Eval
			e.Reset(tt.req)
			got, err := e.Match(p)
			if err != nil {
				t.Fatalf("match: %v", err)
			}
			if got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWhenErrorIsReported(t *testing.T) {
	// A header the expression indexes is absent: CEL reports "no such key".
	p := mustCompile(t, `match: {when: 'request.headers["x-plan"] == "free"'}`+"\n"+oneLimit)
	var e Eval
	e.Reset(req("GET", "h", "/"))
	if _, err := e.Match(p); err == nil {
		t.Fatal("want an evaluation error for a missing header, got none")
	}
}

func TestKeyTemplate(t *testing.T) {
	v6 := req("GET", "h", "/")
	v6.ClientIP = netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	mapped := req("GET", "h", "/")
	mapped.ClientIP = netip.MustParseAddr("::ffff:198.51.100.9")
	tests := []struct {
		key    string
		req    *Request
		want   string
		wantOK bool
	}{
		{"{client_ip}", req("GET", "h", "/"), "203.0.113.7", true},
		{"{client_ip}", v6, "2001:db8:1:2::/64", true},
		{"{client_ip}", mapped, "198.51.100.9", true},
		{"{client_ip/24}", req("GET", "h", "/"), "203.0.113.0/24", true},
		{"{client_ip/24}", v6, "2001:db8:1:2::/64", true},
		{"{client_ip/48}", v6, "2001:db8:1::/48", true},
		{"{client_ip/48}", req("GET", "h", "/"), "203.0.113.7", true},
		{"{client_ip/128}", v6, "2001:db8:1:2:3:4:5:6", true},
		{"user:{header:X-User-ID}", req("GET", "h", "/", "X-User-Id", "alice"), "user:alice", true},
		{"user:{header:x-user-id}", req("GET", "h", "/", "X-User-Id", "alice"), "user:alice", true},
		{"user:{header:X-User-ID}", req("GET", "h", "/"), "", false},
		{"{header:X-User-ID}", req("GET", "h", "/", "X-User-Id", ""), "", true},
		{"k={query:api_key}", req("GET", "h", "/x?a=1&api_key=s%20e+cret"), "k=s e cret", true},
		{"k={query:api_key}", req("GET", "h", "/x?a=1"), "", false},
		{"{method} {host}{path}", req("POST", "api.example.com", "/login"), "POST api.example.com\x1f/login", true},
		{"global", req("GET", "h", "/"), "global", true},
		// A value cannot imitate the template's separators.
		{"{header:A}:{header:B}", req("GET", "h", "/", "A", "x:y", "B", "z"), "x%3Ay:z", true},
		{"{header:A}:{header:B}", req("GET", "h", "/", "A", "x", "B", "y:z"), "x:y%3Az", true},
		{"{header:A}{header:B}", req("GET", "h", "/", "A", "ab", "B", "c"), "ab\x1fc", true},
		{"{header:A}", req("GET", "h", "/", "A", "100%\x00"), "100%25%00", true},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			p := mustCompile(t, "key: '"+tt.key+"'\n"+oneLimit)
			var e Eval
			e.Reset(tt.req)
			got, ok := e.KeyValue(p)
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("KeyValue = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestMissingKeyShared(t *testing.T) {
	p := mustCompile(t, "key: '{header:X-User}'\nonMissingKey: Shared\n"+oneLimit)
	var e Eval
	e.Reset(req("GET", "h", "/"))
	v, ok := e.KeyValue(p)
	if !ok || v != sharedKeyValue {
		t.Fatalf("KeyValue = %q, %v; want the shared bucket", v, ok)
	}
	e.Reset(req("GET", "h", "/", "X-User", "\x00missing"))
	if v2, _ := e.KeyValue(p); v2 == sharedKeyValue {
		t.Fatal("a header value reached the shared bucket's key")
	}
}

func TestCompileErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []string
	}{
		{"unknown placeholder", "key: '{user}'\n" + oneLimit, []string{"spec.key", "unknown placeholder"}},
		{"unclosed placeholder", "key: '{header:A'\n" + oneLimit, []string{"spec.key", "not closed"}},
		{"stray brace", "key: 'a}'\n" + oneLimit, []string{"spec.key", "closes no placeholder"}},
		{"prefix too long", "key: '{client_ip/129}'\n" + oneLimit, []string{"spec.key", "from 1 to 128"}},
		{"CEL syntax", "match: {when: 'request.method =='}\n" + oneLimit, []string{"spec.match.when", "Syntax error"}},
		{"CEL unknown field", "match: {when: 'request.hedaers[\"a\"] == \"b\"'}\n" + oneLimit, []string{"spec.match.when", "undeclared reference"}},
		{"CEL not boolean", "match: {when: 'request.method'}\n" + oneLimit, []string{"spec.match.when", "must be a boolean expression"}},
		{"no algorithm", "limits: [{name: l}]", []string{"spec.limits[0]", "exactly one algorithm"}},
		{"two algorithms", "limits: [{name: l, fixedWindow: {limit: 1, window: 1s}, gcra: {rate: 1, period: 1s, burst: 1}}]", []string{"spec.limits[0]", "exactly one algorithm"}},
		{"duplicate names", "limits: [{name: l, fixedWindow: {limit: 1, window: 1s}}, {name: l, fixedWindow: {limit: 2, window: 1s}}]", []string{"spec.limits[1].name", "Duplicate value"}},
		{"bad duration", "limits: [{name: l, fixedWindow: {limit: 1, window: 1day}}]", []string{"spec.limits[0].fixedWindow.window", "must be a duration"}},
		{"zero count", "limits: [{name: l, tokenBucket: {capacity: 0, refillRate: 1, refillInterval: 1s}}]", []string{"spec.limits[0].tokenBucket.capacity", "from 1 to"}},
		{"cost above capacity", "cost: 5\nlimits: [{name: l, gcra: {rate: 1, period: 1s, burst: 2}}]", []string{"spec.cost", `limit "l"`}},
		{"bad mode", "mode: Audit\n" + oneLimit, []string{"spec.mode", `Unsupported value: "Audit"`}},
		{"no limits", "key: x", []string{"spec.limits", "Required value"}},
		{"beyond exact arithmetic", "limits: [{name: l, gcra: {rate: 7, period: 8784h, burst: 1000000000}}]", []string{"spec.limits[0]", "beyond what the engine counts exactly"}},
		{"bad path", "match: {paths: ['/a*b']}\n" + oneLimit, []string{"spec.match.paths[0]", "'*' only as its last"}},
		{"bad charge", "charge: Denied\n" + oneLimit, []string{"spec.charge", `Unsupported value: "Denied"`}},
		// 10^6 × 1h fits 2^52 µs, twice that does not: fine for charge
		// Admitted (TestCompileLimits), not for Always.
		{"debt beyond exact arithmetic", "charge: Always\nlimits: [{name: l, gcra: {rate: 1, period: 1h, burst: 1000000}}]", []string{"spec.limits[0]", "too large for charge Always"}},
		{"debt beyond exact arithmetic, reserved", "charge: Reserve\nreserve: {}\nlimits: [{name: l, gcra: {rate: 1, period: 1h, burst: 1000000}}]", []string{"spec.limits[0]", "too large for charge Reserve"}},
		{"bad deny status", "response: {denyStatus: 302}\n" + oneLimit, []string{"spec.response.denyStatus", "400 to 599"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileYAML(tt.spec)
			if err == nil {
				t.Fatal("compiled an invalid spec")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCompileLimits(t *testing.T) {
	p := mustCompile(t, `
cost: 2
mode: Shadow
failureMode: Closed
response: {denyStatus: 503, headers: IETF}
limits:
- {name: tb, tokenBucket: {capacity: 10, refillRate: 2, refillInterval: 1s}}
- {name: fw, fixedWindow: {limit: 100, window: 1m}}
- {name: swl, slidingWindowLog: {limit: 5, window: 10s}}
- {name: swc, slidingWindowCounter: {limit: 1000, window: 1h}}
- {name: lb, leakyBucket: {capacity: 5, leakRate: 1}}
- {name: gcra, gcra: {rate: 10, period: 1s, burst: 20}}
`)
	want := []struct {
		alg      ratelimit.Algorithm
		capacity int64
		rate     int64
		window   string
	}{
		{ratelimit.TokenBucket, 10, 2, "5s"},
		{ratelimit.FixedWindow, 100, 0, "1m0s"},
		{ratelimit.SlidingWindowLog, 5, 0, "10s"},
		{ratelimit.SlidingWindowCounter, 1000, 0, "1h0m0s"},
		{ratelimit.LeakyBucket, 5, 1, "5s"},
		{ratelimit.GCRA, 20, 10, "2s"},
	}
	for i, w := range want {
		l := p.Limits[i]
		if l.Limit.Algorithm != w.alg || l.Limit.Capacity != w.capacity || l.Limit.Rate != w.rate || l.Window.String() != w.window {
			t.Errorf("limit %d = %+v window %s, want %+v", i, l.Limit, l.Window, w)
		}
	}
	if p.Cost != 2 || !p.Shadow || !p.FailClosed || p.DenyStatus != 503 || p.HeaderStyle != "IETF" {
		t.Errorf("policy settings = %+v", p)
	}
	if p.Limits[4].Limit.Interval.String() != "1s" {
		t.Errorf("leakInterval default = %s, want 1s", p.Limits[4].Limit.Interval)
	}
	entries := p.AppendEntries(nil, "1.2.3.4", p.Cost)
	if len(entries) != 6 || entries[0].Key != "sluice:v2:{shop/p/1.2.3.4}:tb" || !entries[0].Shadow || entries[0].Cost != 2 {
		t.Errorf("entries[0] = %+v", entries[0])
	}
}

func TestChargeAlways(t *testing.T) {
	for spec, want := range map[string]bool{
		oneLimit:                        false,
		"charge: Admitted\n" + oneLimit: false,
		"charge: Always\n" + oneLimit:   true,
	} {
		p := mustCompile(t, spec)
		entries := p.AppendEntries(nil, "k", 1)
		if p.ChargeAlways != want || entries[0].ChargeAlways != want {
			t.Errorf("%q: policy %v, entry %v; want %v", spec, p.ChargeAlways, entries[0].ChargeAlways, want)
		}
	}
	if _, err := compileYAML("limits: [{name: l, gcra: {rate: 1, period: 1h, burst: 1000000}}]"); err != nil {
		t.Errorf("the limit too large for charge Always, charged when admitted: %v", err)
	}
}

func TestDefaultsWithoutAPIServer(t *testing.T) {
	p := mustCompile(t, oneLimit)
	if p.KeyTemplate() != "{client_ip}" || p.OnMissingKey != "Skip" || p.Cost != 1 || p.Shadow || p.FailClosed || p.HeaderStyle != "Both" {
		t.Errorf("defaults = %+v", p)
	}
}
