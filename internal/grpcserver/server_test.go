package grpcserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/certtest"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// compile is policytest.Compile, short for this package's many specs.
var compile = policytest.Compile

// endpoint is a Server on a loopback port and a client connected to it.
type endpoint struct {
	s     *Server
	conn  *grpc.ClientConn
	authz authv3.AuthorizationClient
	reg   *prometheus.Registry
	// tally counts the checker's decisions (the dashboard's counts).
	tally *check.Tally
	addr  string
}

// start serves a Server with the given store, options and policies until
// the test ends. opts.TLS, when set, is served; clientCreds connect.
func start(t testing.TB, store ratelimit.Backend, opts Options, clientCreds credentials.TransportCredentials, policies ...*policy.Policy) *endpoint {
	t.Helper()
	return startWith(t, check.Options{Backend: store}, opts, clientCreds, policies...)
}

// startWith is start with the checker's options co (its Backend, and what
// else a test sets, such as Overrides; its Observer is told beside the
// endpoint's tally).
func startWith(t testing.TB, co check.Options, opts Options, clientCreds credentials.TransportCredentials, policies ...*policy.Policy) *endpoint {
	t.Helper()
	reg := prometheus.NewRegistry()
	// A store deadline far above a loaded machine's pauses: a test's
	// answers are the store's, never a failure mode's (the failure tests
	// kill redis-server, which refuses at once).
	co.Timeout, co.BreakerCooldown, co.Metrics = 5*time.Second, 200*time.Millisecond, check.NewMetrics(reg)
	tally := check.NewTally(co.Metrics)
	if co.Observer == nil {
		co.Observer = tally
	} else {
		co.Observer = check.Observers{tally, co.Observer}
	}
	opts.Checker = checktest.New(t, co, policies...)
	opts.Registerer = reg
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	if clientCreds == nil {
		clientCreds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(clientCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &endpoint{s: s, conn: conn, authz: authv3.NewAuthorizationClient(conn), reg: reg, tally: tally, addr: ln.Addr().String()}
}

// req is an ext_authz check request as Envoy sends it.
type req struct {
	method, host, path string
	headers            map[string]string
	source             string // the downstream address; "" none
	extensions         map[string]string
}

func (r req) proto() *authv3.CheckRequest {
	method := r.method
	if method == "" {
		method = "GET"
	}
	headers := map[string]string{":method": method, ":path": r.path, ":authority": r.host}
	for k, v := range r.headers {
		headers[k] = v
	}
	attrs := &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Host: r.host, Path: r.path, Scheme: "http", Protocol: "HTTP/1.1", Headers: headers,
		}},
		ContextExtensions: r.extensions,
	}
	if r.source != "" {
		attrs.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: r.source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}},
		}}}
	}
	return &authv3.CheckRequest{Attributes: attrs}
}

// answer is a CheckResponse read the way Envoy reads it.
type answer struct {
	code        codes.Code
	httpStatus  int // 200 for an allow
	upstream    map[string]string
	client      map[string]string // the headers the client gets
	body        string
	contentType string
}

func (e *endpoint) check(t testing.TB, r req) answer {
	t.Helper()
	resp, err := e.authz.Check(context.Background(), r.proto())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	a := answer{code: codes.Code(resp.GetStatus().GetCode()), upstream: map[string]string{}, client: map[string]string{}}
	collect := func(into map[string]string, opts []*corev3.HeaderValueOption) {
		for i, o := range opts {
			if i > 0 && opts[i-1].GetHeader().GetKey() > o.GetHeader().GetKey() {
				t.Errorf("headers out of order: %s before %s", opts[i-1].GetHeader().GetKey(), o.GetHeader().GetKey())
			}
			if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("header %s: append action %v, want OVERWRITE_IF_EXISTS_OR_ADD", o.GetHeader().GetKey(), o.GetAppendAction())
			}
			into[o.GetHeader().GetKey()] = o.GetHeader().GetValue()
		}
	}
	switch hr := resp.GetHttpResponse().(type) {
	case *authv3.CheckResponse_OkResponse:
		if a.code != codes.OK {
			t.Fatalf("ok_response with status %v", a.code)
		}
		a.httpStatus = 200
		collect(a.upstream, hr.OkResponse.GetHeaders())
		collect(a.client, hr.OkResponse.GetResponseHeadersToAdd())
	case *authv3.CheckResponse_DeniedResponse:
		if a.code == codes.OK {
			t.Fatal("denied_response with status OK: Envoy would allow")
		}
		a.httpStatus = int(hr.DeniedResponse.GetStatus().GetCode())
		collect(a.client, hr.DeniedResponse.GetHeaders())
		a.body = hr.DeniedResponse.GetBody()
		a.contentType = a.client["Content-Type"]
	default:
		t.Fatalf("http_response %T", hr)
	}
	return a
}

func problem(t testing.TB, body string) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	return p
}

var shop = map[string]string{"namespace": "shop"}

// A penalty box's ban is a rate-limit denial for Envoy (RESOURCE_EXHAUSTED,
// 429), and its problem says the ban, not a limit, denies.
func TestBanIsResourceExhausted(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil,
		compile(t, "shop", "signin", "key: '{client_ip}'\nlimits: [{name: burst, fixedWindow: {limit: 1, window: 1m}}]\npenalty: {denials: 2, within: 1m, ban: 5m, maxBan: 1h}"))
	r := req{host: "shop.example.com", path: "/signin", source: "203.0.113.5", extensions: shop}
	var a answer
	for range 4 { // 1 allowed, 2 denials issue the ban, 1 denied by it
		a = e.check(t, r)
	}
	p := problem(t, a.body)
	if a.code != codes.ResourceExhausted || a.httpStatus != 429 || p["limit"] != nil ||
		p["detail"] != "policy shop/signin has banned this key after repeated denials (its penalty box); retry in 300s" {
		t.Fatalf("banned: %v %d, problem %v", a.code, a.httpStatus, p)
	}
}

// A limit of 3: three checks are allowed, with the headers for the
// upstream and the client, then denials with 429, Retry-After and the
// problem body, as the HTTP endpoint answers them.
func TestAllowThenDeny(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil,
		compile(t, "shop", "api", "match: {paths: [/api/*]}\nkey: '{client_ip}'\nresponse: {headers: Both}\nlimits: [{name: burst, fixedWindow: {limit: 3, window: 1m}}]"))
	r := req{host: "shop.example.com", path: "/api/items?page=2", source: "203.0.113.5", extensions: shop}
	for i := 1; i <= 3; i++ {
		a := e.check(t, r)
		if a.code != codes.OK || a.httpStatus != 200 {
			t.Fatalf("check %d: %v %d, want OK", i, a.code, a.httpStatus)
		}
		wantRemaining := "r=" + string(rune('0'+3-i))
		for who, h := range map[string]map[string]string{"upstream": a.upstream, "client": a.client} {
			if got := h["RateLimit-Policy"]; got != `"api/burst";q=3;w=60` {
				t.Errorf("check %d, %s: RateLimit-Policy %q", i, who, got)
			}
			if got := h["RateLimit"]; !strings.Contains(got, wantRemaining) {
				t.Errorf("check %d, %s: RateLimit %q, want %s", i, who, got, wantRemaining)
			}
			if got := h["X-RateLimit-Remaining"]; got != string(rune('0'+3-i)) {
				t.Errorf("check %d, %s: X-RateLimit-Remaining %q", i, who, got)
			}
		}
	}
	for i := 4; i <= 5; i++ {
		a := e.check(t, r)
		if a.code != codes.ResourceExhausted || a.httpStatus != 429 {
			t.Fatalf("check %d: %v %d, want RESOURCE_EXHAUSTED and 429", i, a.code, a.httpStatus)
		}
		if a.contentType != "application/problem+json" {
			t.Errorf("check %d: Content-Type %q", i, a.contentType)
		}
		if ra := a.client["Retry-After"]; ra == "" || ra == "0" {
			t.Errorf("check %d: Retry-After %q", i, ra)
		}
		if got := a.client["RateLimit"]; !strings.HasPrefix(got, `"api/burst";r=0;t=`) {
			t.Errorf("check %d: RateLimit %q", i, got)
		}
		p := problem(t, a.body)
		if p["type"] != "https://sluice.dev/problems/rate-limited" || p["status"] != float64(429) || p["policy"] != "shop/api" || p["limit"] != "burst" {
			t.Errorf("check %d: problem %v", i, p)
		}
	}
	// Another client has its own bucket; a path outside the policy none.
	if a := e.check(t, req{host: "shop.example.com", path: "/api/items", source: "203.0.113.6", extensions: shop}); a.code != codes.OK {
		t.Errorf("another client: %v", a.code)
	}
	if a := e.check(t, req{host: "shop.example.com", path: "/about", source: "203.0.113.5", extensions: shop}); a.code != codes.OK || len(a.client) != 0 {
		t.Errorf("no policy: %v %v, want OK without headers", a.code, a.client)
	}
	decisions := testutil.ToFloat64(counterOf(t, e.reg, "sluice_decisions_total", map[string]string{"namespace": "shop", "policy": "api", "limit": "burst", "result": "allowed"}))
	if decisions != 4 {
		t.Errorf("sluice_decisions_total allowed = %v, want 4", decisions)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_grpc_requests_total", map[string]string{"service": authzService, "code": "OK"})); got != 5 {
		t.Errorf("sluice_grpc_requests_total OK = %v, want 5", got)
	}
	denied := testutil.ToFloat64(counterOf(t, e.reg, "sluice_grpc_requests_total", map[string]string{"service": authzService, "code": "ResourceExhausted"}))
	if denied != 2 {
		t.Errorf("sluice_grpc_requests_total ResourceExhausted = %v, want 2", denied)
	}
}

// counterOf finds one series of a counter in reg.
func counterOf(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "copy"}, func() float64 { return m.GetCounter().GetValue() })
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

// The policy's denyStatus is the denial's HTTP status; a policy that
// denies requests without its key answers PERMISSION_DENIED.
func TestDenyStatusAndMissingKey(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil,
		compile(t, "shop", "status", "match: {paths: [/s]}\nkey: global\nresponse: {denyStatus: 503}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "shop", "keyed", "match: {paths: [/k]}\nkey: '{header:X-Api-Key}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"))
	r := req{host: "h", path: "/s", extensions: shop}
	if a := e.check(t, r); a.code != codes.OK {
		t.Fatalf("first: %v", a.code)
	}
	if a := e.check(t, r); a.httpStatus != 503 || a.code != codes.ResourceExhausted || problem(t, a.body)["status"] != float64(503) {
		t.Errorf("second: %v %d %s, want 503", a.code, a.httpStatus, a.body)
	}
	a := e.check(t, req{host: "h", path: "/k", extensions: shop})
	if a.code != codes.PermissionDenied || a.httpStatus != 429 || problem(t, a.body)["type"] != "https://sluice.dev/problems/missing-key" {
		t.Errorf("no key: %v %d %s", a.code, a.httpStatus, a.body)
	}
	// Envoy sends header names in lower case; the policy reads X-Api-Key.
	if a := e.check(t, req{host: "h", path: "/k", headers: map[string]string{"x-api-key": "k1"}, extensions: shop}); a.code != codes.OK || a.upstream["RateLimit"] == "" {
		t.Errorf("with key: %v %v", a.code, a.upstream)
	}
}

// The namespace is the route's context extension, else the configured
// default; without either the check is refused, never allowed.
func TestNamespace(t *testing.T) {
	policies := []*policy.Policy{
		compile(t, "shop", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "blog", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
	}
	withDefault := start(t, memstore.New().Backend(), Options{DefaultNamespace: "shop"}, nil, policies...)
	statuses := func(e *endpoint, ext map[string]string, n int) []int {
		var got []int
		for range n {
			got = append(got, e.check(t, req{host: "h", path: "/", extensions: ext}).httpStatus)
		}
		return got
	}
	if got := statuses(withDefault, nil, 2); got[0] != 200 || got[1] != 429 {
		t.Errorf("default namespace shop (limit 1): %v", got)
	}
	if got := statuses(withDefault, map[string]string{"namespace": "blog"}, 3); got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Errorf("extension blog (limit 2): %v", got)
	}
	if got := statuses(withDefault, map[string]string{"namespace": "empty"}, 3); got[2] != 200 {
		t.Errorf("a namespace without policies: %v", got)
	}

	noDefault := start(t, memstore.New().Backend(), Options{}, nil, policies...)
	for name, ext := range map[string]map[string]string{
		"no extension":   nil,
		"other keys":     {"route": "x"},
		"empty":          {"namespace": ""},
		"not a DNS name": {"namespace": "Shop/x"},
	} {
		a := noDefault.check(t, req{host: "h", path: "/", extensions: ext})
		if a.code != codes.InvalidArgument || a.httpStatus != 400 || !strings.Contains(problem(t, a.body)["detail"].(string), "attributes.context_extensions.namespace") {
			t.Errorf("%s: %v %d %s, want a 400 denial naming the extension", name, a.code, a.httpStatus, a.body)
		}
	}
	if _, err := New(Options{Checker: checktest.New(t, check.Options{}), DefaultNamespace: "Not_A_Namespace"}); err == nil {
		t.Error("New accepted an invalid default namespace")
	}
}

// Attributes the endpoint cannot read are denied with 400 and a problem
// naming the attribute, never allowed.
func TestBadAttributes(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil, compile(t, "shop", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"))
	good := req{host: "h", path: "/", source: "203.0.113.1", extensions: shop}
	for name, c := range map[string]struct {
		r    req
		attr string
	}{
		"lower-case method":  {req{method: "get", host: "h", path: "/", extensions: shop}, "attributes.request.http.method"},
		"no host":            {req{path: "/", extensions: shop}, "attributes.request.http.host"},
		"unclosed IPv6 host": {req{host: "[::1", path: "/", extensions: shop}, "attributes.request.http.host"},
		"port only":          {req{host: ":80", path: "/", extensions: shop}, "attributes.request.http.host"},
		"no path":            {req{host: "h", extensions: shop}, "attributes.request.http.path"},
		"asterisk":           {req{method: "OPTIONS", host: "h", path: "*", extensions: shop}, "attributes.request.http.path"},
		"bad escape":         {req{host: "h", path: "/a%zz", extensions: shop}, "attributes.request.http.path"},
		"space in path":      {req{host: "h", path: "/a b", extensions: shop}, "attributes.request.http.path"},
		"long path":          {req{host: "h", path: "/" + strings.Repeat("a", policy.MaxURLBytes), extensions: shop}, "attributes.request.http.path"},
		"long headers":       {req{host: "h", path: "/", headers: map[string]string{"x-a": strings.Repeat("a", 40<<10), "x-b": strings.Repeat("b", 40<<10)}, extensions: shop}, "attributes.request.http.headers"},
		"bad header name":    {req{host: "h", path: "/", headers: map[string]string{"x a": "1"}, extensions: shop}, "attributes.request.http.headers"},
		"bad source":         {req{host: "h", path: "/", source: "not-an-ip", extensions: shop}, "attributes.source.address.socket_address.address"},
	} {
		a := e.check(t, c.r)
		if a.code != codes.InvalidArgument || a.httpStatus != 400 {
			t.Errorf("%s: %v %d, want INVALID_ARGUMENT and 400", name, a.code, a.httpStatus)
			continue
		}
		p := problem(t, a.body)
		if p["type"] != "https://sluice.dev/problems/bad-request" || !strings.Contains(p["detail"].(string), c.attr) {
			t.Errorf("%s: problem %v, want one naming %s", name, p, c.attr)
		}
	}
	resp, err := e.authz.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{ContextExtensions: shop}})
	if err != nil || resp.GetDeniedResponse().GetStatus().GetCode() != 400 || !strings.Contains(resp.GetDeniedResponse().GetBody(), "attributes.request.http") {
		t.Errorf("no HTTP attributes: %v %v", resp, err)
	}
	if a := e.check(t, good); a.code != codes.OK {
		t.Errorf("a good request after the bad ones: %v", a.code)
	}
}

// X-Forwarded-For is believed only from a trusted source address, as on
// the HTTP endpoint: an untrusted client cannot choose its own key.
func TestTrustedProxies(t *testing.T) {
	trusted, err := clientip.ParseTrustedProxies([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, memstore.New().Backend(), Options{TrustedProxies: trusted}, nil,
		compile(t, "shop", "p", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	untrusted := func(xff string) int {
		return e.check(t, req{host: "h", path: "/", source: "203.0.113.7", headers: map[string]string{"x-forwarded-for": xff, "x-real-ip": xff}, extensions: shop}).httpStatus
	}
	if s := untrusted("198.51.100.1"); s != 200 {
		t.Fatalf("first from an untrusted peer: %d", s)
	}
	for _, xff := range []string{"198.51.100.2", "198.51.100.3, 10.0.0.1", "garbage"} {
		if s := untrusted(xff); s != 429 {
			t.Errorf("untrusted peer claiming %q: %d, want 429 (keyed by the peer)", xff, s)
		}
	}
	// Behind a trusted proxy, the right-most untrusted hop is the client.
	viaProxy := func(xff string) int {
		return e.check(t, req{host: "h", path: "/", source: "10.1.2.3", headers: map[string]string{"x-forwarded-for": xff}, extensions: shop}).httpStatus
	}
	if a, b := viaProxy("192.0.2.1"), viaProxy("192.0.2.2"); a != 200 || b != 200 {
		t.Errorf("two clients behind a trusted proxy: %d %d, want 200 200", a, b)
	}
	if s := viaProxy("192.0.2.9, 192.0.2.1"); s != 429 {
		t.Errorf("client 192.0.2.1 with a forged hop on its left: %d, want 429", s)
	}
	var r policy.Request
	if err := readRequest(req{host: "h", path: "/", source: "::ffff:10.1.2.3", headers: map[string]string{"x-forwarded-for": "192.0.2.4"}}.proto().GetAttributes(), trusted, &r); err != nil || r.ClientIP != netip.MustParseAddr("192.0.2.4") {
		t.Errorf("IPv4-mapped trusted source: %v %v", r.ClientIP, err)
	}
}

// The same spellings the HTTP endpoint's tests use cannot skip a policy
// for one host and the /api/ tree: Envoy's path is the request target as
// sent, read by checkhttp like every profile's.
func TestSpellingsCannotSkipAPolicy(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{DefaultNamespace: "shop"}, nil,
		compile(t, "shop", "api", "match: {hosts: [api.example.com], paths: [\"/api/*\", /login]}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	if a := e.check(t, req{host: "api.example.com", path: "/api/first"}); a.code != codes.OK {
		t.Fatalf("first: %v", a.code)
	}
	for _, c := range []struct{ host, path string }{
		{"api.example.com", "/api/x%2F..%2F..%2Fpub"},
		{"api.example.com", "/api/x%2f..%2f..%2fpub"},
		{"api.example.com", "/api%2F..%2Fpub/../api/y"},
		{"api.example.com", "/api/%2e%2e/pub"},
		{"api.example.com", "/api/%252e%252e/pub"},
		{"api.example.com", "//api/items"},
		{"api.example.com", "/api/./items"},
		{"api.example.com", "/x/../api/items"},
		{"api.example.com", "/api/items%3Fq"},
		{"api.example.com", "/%61pi/items"},
		{"api.example.com", "/login?next=/pub"},
		{"api.example.com", "/login#frag"},
		{"api.example.com:1:2", "/login"},
		{"api.example.com:8443", "/login"},
		{"API.Example.COM.", "/login"},
	} {
		if a := e.check(t, req{host: c.host, path: c.path}); a.httpStatus != 429 {
			t.Errorf("%s%s: %d, want 429 (the api.example.com policy)", c.host, c.path, a.httpStatus)
		}
	}
	for _, c := range []struct{ host, path string }{
		{"api.example.com", "/pub"},
		{"api.example.com", "/apix/y"},
		{"api.example.com", "/x/%2F/api"},
		{"other.example.com", "/api/items"},
	} {
		if a := e.check(t, req{host: c.host, path: c.path}); a.httpStatus != 200 {
			t.Errorf("%s%s: %d, want 200 (outside the policy)", c.host, c.path, a.httpStatus)
		}
	}
}

// With Envoy's encode_raw_headers the headers come as header_map, raw
// values, repeated names kept apart.
func TestRawHeaderMap(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{DefaultNamespace: "shop"}, nil,
		compile(t, "shop", "p", "match: {headers: [{name: X-Tenant, value: acme}]}\nkey: '{header:X-Api-Key}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	send := func(key string) codes.Code {
		r := req{host: "h", path: "/"}.proto()
		h := r.GetAttributes().GetRequest().GetHttp()
		h.Headers = nil
		h.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":path", RawValue: []byte("/")},
			{Key: "x-tenant", RawValue: []byte("acme")},
			{Key: "x-api-key", RawValue: []byte(key)},
		}}
		resp, err := e.authz.Check(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return codes.Code(resp.GetStatus().GetCode())
	}
	if a, b, c := send("k1"), send("k1"), send("k2"); a != codes.OK || b != codes.ResourceExhausted || c != codes.OK {
		t.Errorf("raw headers: %v %v %v, want OK RESOURCE_EXHAUSTED OK", a, b, c)
	}
}

// The health service says SERVING while the server serves, and
// reflection lists the ext_authz service, as grpcurl asks for it.
func TestHealthAndReflection(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil)
	health := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", authzService, rlsService} {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !containsAll(names, authzService, rlsService, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}
	_ = stream.CloseSend()
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// Shutdown turns health NOT_SERVING and stops the server.
func TestServeStops(t *testing.T) {
	s, err := New(Options{Checker: checktest.New(t, check.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if st, _ := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{}); st.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after shutdown: %v", st.GetStatus())
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("the port still accepts connections after shutdown")
	}
}

// TLS: the endpoint serves the configured certificate, and a client that
// verifies it checks over TLS; a plaintext client is refused.
func TestTLS(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	server := ca.Server(t, "sluice")
	cfg := &Config{TLSCertFile: server.CertFile, TLSKeyFile: server.KeyFile}
	tlsCfg, err := LoadTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	e := start(t, memstore.New().Backend(), Options{TLS: tlsCfg, DefaultNamespace: "shop"}, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}),
		compile(t, "shop", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	if a, b := e.check(t, req{host: "h", path: "/"}), e.check(t, req{host: "h", path: "/"}); a.code != codes.OK || b.httpStatus != 429 {
		t.Errorf("over TLS: %v then %d, want OK then 429", a.code, b.httpStatus)
	}
	plain, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := authv3.NewAuthorizationClient(plain).Check(ctx, req{host: "h", path: "/"}.proto()); err == nil {
		t.Error("a plaintext client was answered by the TLS endpoint")
	}
	for _, bad := range []*Config{{TLSCertFile: cfg.TLSCertFile}, {TLSCertFile: filepath.Join(t.TempDir(), "missing.pem"), TLSKeyFile: cfg.TLSKeyFile}} {
		if _, err := LoadTLS(bad); err == nil {
			t.Errorf("LoadTLS(%+v) accepted", *bad)
		}
	}
}
