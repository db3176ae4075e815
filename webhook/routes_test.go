package webhook

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// routePolicies are the policies of TestRoutesAnswerAlike: shopPolicy in
// one namespace per proxy profile, and policies for the other ways a
// check is answered.
func routePolicies(t testing.TB) []*policy.Policy {
	ps := []*policy.Policy{
		compile(t, "odd", "legacy", "key: global\nresponse: {denyStatus: 430, headers: Legacy}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "keyed", "by-user", "key: '{header:X-User}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "quoted", "p", "key: global\nresponse: {headers: IETF}\nlimits: [{name: l, tokenBucket: {capacity: 1, refillRate: 1, refillInterval: 1h}}]"),
	}
	for i := range proxies {
		ps = append(ps, compile(t, "shop"+strconv.Itoa(i), "api", shopPolicy))
	}
	return ps
}

// routeEndpoints serves the same policies twice, on the same stopped
// clock: through net/http, and as the check process serves them (the
// check routes native on fasthttp). Each has its own store, so the same
// requests in the same order leave both in the same state.
func routeEndpoints(t *testing.T) (netHTTP, native string) {
	now := func() time.Time { return time.Unix(1_800_000_000, 250_000_000) }
	serve := func(serve func(testing.TB, http.Handler) string) string {
		c := checktest.New(t, check.Options{Timeout: time.Second, Now: now}, routePolicies(t)...)
		s, err := New(Options{Checker: c, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(serve(t, s), "http://")
	}
	return serve(serveNetHTTP), serve(serveFast)
}

// wireAnswer is an answer as it crossed the wire: the status line, the
// header lines (sorted: the servers order them differently) and the body;
// without what is the server's framing rather than the answer: the
// version (fasthttp answers HTTP/1.1 to an HTTP/1.0 request, as RFC 9110
// advises; net/http HTTP/1.0), Date, and Connection (fasthttp states a
// close that net/http leaves implied).
type wireAnswer struct {
	status  string
	headers []string
	body    string
}

func (a wireAnswer) String() string {
	return a.status + "\n" + strings.Join(a.headers, "\n") + "\n\n" + a.body
}

// exchange sends raw on a new connection to addr and reads the answer's
// bytes.
func exchange(t *testing.T, addr, raw string) wireAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line := func() string {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: reading the answer: %v", raw, err)
		}
		return strings.TrimSuffix(l, "\r\n")
	}
	_, status, _ := strings.Cut(line(), " ")
	a := wireAnswer{status: status}
	length := 0
	for l := line(); l != ""; l = line() {
		name, value, _ := strings.Cut(l, ":")
		switch strings.ToLower(name) {
		case "date", "connection":
			continue
		case "content-length":
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		}
		a.headers = append(a.headers, l)
	}
	slices.Sort(a.headers)
	if !strings.HasPrefix(raw, "HEAD ") {
		body := make([]byte, length)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatalf("%q: reading the body: %v", raw, err)
		}
		a.body = string(body)
	}
	return a
}

// request is the text of a request with the headers in the order given.
func request(method, target, proto string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", method, target, proto)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	return b.String()
}

// proxyRequest is px's check request, headers as the proxy spells them,
// with changes (a value of "" drops a header).
func proxyRequest(px int, proto string, change map[string]string, spell func(string) string) string {
	p := proxies[px]
	h := cloneHeaders(p.headers)
	if _, ok := h["Host"]; !ok {
		h["Host"] = "sluice.sluice-system:8080"
	}
	for k, v := range change {
		h[k] = v
	}
	var list []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		if h[k] != "" {
			list = append(list, spell(k), h[k])
		}
	}
	return request(p.method, p.path("shop"+strconv.Itoa(px)), proto, list...)
}

func asSent(s string) string { return s }

// TestRoutesAnswerAlike: every check request, whatever proxy profile sent
// it, gets the same decision and the same bytes on the wire through the
// net/http route and the native fasthttp route (status line, header lines
// and body; see wireAnswer).
func TestRoutesAnswerAlike(t *testing.T) {
	netHTTP, native := routeEndpoints(t)
	var requests []string
	for i := range proxies {
		for range 5 { // allowed three times, then denied
			requests = append(requests, proxyRequest(i, "HTTP/1.1", nil, asSent))
		}
		requests = append(requests,
			proxyRequest(i, "HTTP/1.1", nil, strings.ToLower),
			proxyRequest(i, "HTTP/1.0", nil, asSent),
			proxyRequest(i, "HTTP/1.1", map[string]string{"Connection": "close"}, asSent),
			proxyRequest(i, "HTTP/1.1", map[string]string{"X-Forwarded-For": "198.51.100.8", "X-Real-IP": "198.51.100.8"}, asSent),
			proxyRequest(i, "HTTP/1.1", map[string]string{"X-Forwarded-For": " 203.0.113.9 , 198.51.100.9 "}, strings.ToUpper),
		)
	}
	nginx := func(ns, url, method string, more ...string) string {
		return request("GET", "/check/"+ns, "HTTP/1.1", append([]string{"Host", "sluice", "X-Original-URL", url, "X-Original-Method", method, "X-Real-IP", "198.51.100.7"}, more...)...)
	}
	forwardAuth := func(target, host, uri string, more ...string) string {
		return request("GET", target, "HTTP/1.1", append([]string{"Host", "sluice", "X-Forwarded-Method", "POST", "X-Forwarded-Host", host, "X-Forwarded-Uri", uri, "X-Forwarded-For", "198.51.100.7"}, more...)...)
	}
	envoy := func(method, target string, more ...string) string {
		return request(method, target, "HTTP/1.1", append([]string{"Host", "shop.example.com", "X-Forwarded-For", "198.51.100.7"}, more...)...)
	}
	requests = append(requests,
		// A denial with a status net/http and fasthttp have no text for,
		// and legacy headers only.
		nginx("odd", "http://h/", "GET"), nginx("odd", "http://h/", "GET"),
		// IETF headers only; Retry-After.
		forwardAuth("/check/quoted", "h", "/"), forwardAuth("/check/quoted", "h", "/"),
		// A request without the key is denied (missing-key problem); with
		// it, it is counted.
		nginx("keyed", "http://h/", "GET"), nginx("keyed", "http://h/", "GET", "X-User", "alice"), nginx("keyed", "http://h/", "GET", "x-user", "alice"),
		// The host nginx routed by; the check URL's query.
		request("GET", "/check/shop0?x=1&host=SHOP.example.com", "HTTP/1.1", "Host", "s", "X-Original-URL", "http://evil/api/x", "X-Original-Method", "POST"),
		request("GET", "/check/shop0?host=", "HTTP/1.1", "Host", "s", "X-Original-URL", "http://evil/api/x", "X-Original-Method", "POST"),
		// Requests the proxy got wrong: 400 naming the header.
		request("GET", "/check/shop0", "HTTP/1.1", "Host", "s"),
		nginx("shop0", "/relative", "GET"),
		nginx("shop0", "http://h/a%zz", "GET"),
		nginx("shop0", "http://[::1/", "GET"),
		nginx("shop0", "http://h/"+strings.Repeat("a", 20<<10), "GET"),
		forwardAuth("/check/shop1", "shop.example.com", "/api/x", "X-Original-URL", "http://h/"),
		forwardAuth("/check/shop1", "shop.example.com", "api/x"),
		envoy("M-SEARCH", "/envoy/shop3/api/items"),
		// Routes: one policy, an unknown policy, no namespace, a path
		// the route cannot take, and Envoy's namespace rules.
		forwardAuth("/check/shop1/api", "shop.example.com", "/api/x"),
		forwardAuth("/check/shop1/missing", "shop.example.com", "/api/x"),
		forwardAuth("/check/", "shop.example.com", "/api/x"),
		forwardAuth("/check/shop1/api/x", "shop.example.com", "/api/x"),
		forwardAuth("/check/sh%6Fp1", "shop.example.com", "/api/x"),
		envoy("GET", "/envoy/"), envoy("GET", "/envoy/Shop3/api/x"), envoy("GET", "/envoy/sh%6Fp3/api/x"),
		// Envoy: the original path as sent, and its query.
		envoy("POST", "/envoy/shop3"), envoy("POST", "/envoy/shop3?x=1"), envoy("POST", "/envoy/shop3?"),
		envoy("POST", "/envoy/shop3/api/%2e%2e/pub?q=%20"), envoy("POST", "/envoy/shop3/x/../api/y#frag"),
		envoy("HEAD", "/envoy/shop3/api/items"), envoy("PROPFIND", "/envoy/shop3/api/items"),
		envoy("POST", "/envoy/shop3/api/items", "Content-Length", "5")+"hello",
	)
	for i, raw := range requests {
		want, got := exchange(t, netHTTP, raw), exchange(t, native, raw)
		if got.String() != want.String() {
			t.Errorf("request %d %.120q:\nnative:\n%s\nnet/http:\n%s", i, raw, got, want)
		}
	}
}

// nativeStatus answers a GET of target with headers through s's native
// route, the request read as the check process's server reads it. ok is
// false when no such request reaches the route: a value with a line break
// cannot be sent as one header, and fasthttp refuses what it cannot parse.
func nativeStatus(tb testing.TB, s *CheckEndpoint, target string, headers map[string]string) (status int, ok bool) {
	tb.Helper()
	var b strings.Builder
	b.WriteString("GET " + target + " HTTP/1.1\r\nHost: sluice\r\n")
	for k, v := range headers {
		if strings.ContainsAny(k+v, "\r\n") {
			return 0, false
		}
		b.WriteString(k + ": " + v + "\r\n")
	}
	b.WriteString("\r\n")
	ctx, err := readNative(b.String())
	if err != nil {
		return 0, false
	}
	if !s.ServeFastHTTP(ctx) {
		tb.Fatalf("%q: not served natively", target)
	}
	return ctx.Response.StatusCode(), true
}

// sentAsIs reports whether net/http's server would read v as it is: no
// control bytes (it refuses them) and no spaces around (it trims them).
// The fuzz tests hold both routes to the same answer for such values.
func sentAsIs(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// TestNativeRoutes: the check routes are served natively, whatever the
// method or body; anything else is left, untouched, to ServeHTTP: the
// other routes, a target in absolute form, and a /check/ path with
// escapes, which net/http's reading decodes.
func TestNativeRoutes(t *testing.T) {
	s := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]")).server
	for raw, want := range map[string]bool{
		"GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                                         true,
		"GET /check/ns/p?x=1&y=a:b@c HTTP/1.1\r\nHost: h\r\n\r\n":                           true,
		"GET /check/ns/(x) HTTP/1.1\r\nHost: h\r\n\r\n":                                     true,
		"HEAD /envoy/ns/a/b HTTP/1.1\r\nHost: h\r\n\r\n":                                    true,
		"GET /envoy/ns/a%2Fb/%2e%2e HTTP/1.1\r\nHost: h\r\n\r\n":                            true,
		"GET /envoy/NS/a HTTP/1.1\r\nHost: h\r\n\r\n":                                       true, // a 404 of its own
		"PROPFIND /check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                                    true,
		"POST /check/ns HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx":                  true,
		"POST /check/ns HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": true,
		"GET /check/n%73 HTTP/1.1\r\nHost: h\r\n\r\n":                                       false,
		"GET /checks HTTP/1.1\r\nHost: h\r\n\r\n":                                           false,
		"GET /envoy HTTP/1.1\r\nHost: h\r\n\r\n":                                            false,
		"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n":                                          false,
		"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n":                                          false,
		"POST /v1/check HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}":                 false,
		"GET http://h/check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                                 false,
	} {
		ctx := nativeContext(t, raw)
		headers := ctx.Response.Header.Len()
		if got := s.ServeFastHTTP(ctx); got != want {
			t.Errorf("%q: native %v, want %v", raw, got, want)
		}
		if !want && (ctx.Response.StatusCode() != http.StatusOK || ctx.Response.Header.Len() != headers || len(ctx.Response.Body()) != 0) {
			t.Errorf("%q: left to ServeHTTP, but the response was touched: %s", raw, &ctx.Response)
		}
	}
}

// TestNativeRouteAllocations: the native route adds one allocation to the
// check's own (the request's strings, all cut from one copy), whatever
// the number of headers; the answer is rendered into fasthttp's buffers.
func TestNativeRouteAllocations(t *testing.T) {
	s := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "api", "limits: [{name: burst, tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}}]")).server
	ctx := nativeContext(t, "GET /check/shop HTTP/1.1\r\nHost: sluice\r\nX-Original-URL: http://shop.example.com/api/items?page=2\r\n"+
		"X-Original-Method: GET\r\nX-Real-IP: 10.1.2.3\r\nX-Forwarded-For: 10.1.2.3\r\nX-Sent-From: nginx-ingress-controller\r\nX-User: alice\r\n\r\n")
	serve := func() {
		ctx.Response.Reset()
		s.ServeFastHTTP(ctx)
	}
	serve()
	if ctx.Response.StatusCode() != http.StatusOK || len(ctx.Response.Header.Peek("RateLimit")) == 0 {
		t.Fatalf("answer %s", &ctx.Response)
	}
	native := testing.AllocsPerRun(1000, serve)

	// The same check, its request already read.
	st := new(requestState)
	in := &checkRequest{method: "GET", host: "sluice", peer: netip.MustParseAddr("127.0.0.1"), header: http.Header{
		"X-Original-Url": {"http://shop.example.com/api/items?page=2"}, "X-Original-Method": {"GET"}, "X-Real-Ip": {"10.1.2.3"},
		"X-Forwarded-For": {"10.1.2.3"}, "X-Sent-From": {"nginx-ingress-controller"}, "X-User": {"alice"},
	}}
	rt := route{namespace: "shop"}
	checkOnly := testing.AllocsPerRun(1000, func() {
		if _, err := s.read(st, in, rt, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.check(context.Background(), st, rt); err != nil || !st.out.Allowed {
			t.Fatal(err, st.out.Allowed)
		}
	})
	t.Logf("%.1f allocations per allowed check on the native route, %.1f of them the check's", native, checkOnly)
	if native > checkOnly+1 {
		t.Errorf("%.1f allocations per allowed check, want at most the check's %.1f + 1", native, checkOnly)
	}
}
