package intake_test

// The differential test of the intakes: one table of request spellings,
// each sent through every way a request reaches the policies (the HTTP
// check endpoint's profiles, POST /v1/check, ext_authz over gRPC, the
// middleware in the process and remotely), must get one decision: refused
// as unreadable, denied, or allowed having charged the same buckets of the
// same policies. Each intake maps its fields onto intake.Read; this test
// is what keeps them mapping alike.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
	"github.com/sluice-dev/sluice/middleware"
	"github.com/sluice-dev/sluice/webhook"
)

// intakePolicies scope one policy by each attribute an intake reads, each
// keyed by that attribute, so the buckets a request charges show how it
// was read. tenant denies a request under /tenant/ without X-Tenant.
var intakePolicies = map[string]string{
	"host":   "match: {hosts: [api.example.com]}\nkey: '{host}'",
	"path":   "match: {paths: ['/api/*', '/login']}\nkey: '{path}'",
	"method": "match: {methods: [POST]}\nkey: '{method}'",
	"plan":   "match: {headers: [{name: X-Plan, value: gold}]}\nkey: '{header:X-Plan}'",
	"tenant": "match: {paths: ['/tenant/*']}\nkey: '{header:X-Tenant}'\nonMissingKey: Deny",
	"client": "key: '{client_ip/128}'", // IPv6 clients too by their whole address
}

const intakeLimit = "\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]\n"

// The peers a spelling arrives from: a trusted proxy, and an address
// outside --trusted-proxies (both on loopback, where the test can dial
// from either).
const (
	trustedPeer   = "127.0.0.1"
	untrustedPeer = "127.0.0.2"
)

func intakeTrusted(t *testing.T) *clientip.TrustedProxies {
	tp, err := clientip.ParseTrustedProxies([]string{trustedPeer + "/32", "10.0.0.0/8", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// spelling is an original request as a client or its proxy sends it.
type spelling struct {
	name      string
	method    string      // default GET
	host      string      // the authority, as sent; default api.example.com
	noHost    bool        // an empty authority
	target    string      // path and query, as sent; default /login
	header    [][2]string // the client's headers, in order, repeated as sent
	untrusted bool        // the peer is not a trusted proxy
	// jsonClientIP is request.clientIP of /v1/check, which takes the
	// client's address as given rather than reading forwarded headers.
	// Empty: the peer's, when the spelling forwards no address; else
	// /v1/check cannot express the spelling.
	jsonClientIP string
	// want is the one decision: "refused", "denied", or the buckets
	// charged, "policy=key ..." in policy order.
	want string
	// serverRefuses names the intakes whose HTTP server refuses the
	// spelling before any intake reads it: stricter, never an allow.
	serverRefuses []string
}

func (s spelling) peer() string {
	if s.untrusted {
		return untrustedPeer
	}
	return trustedPeer
}

// base is the decision of the plain request, GET api.example.com/login
// from a trusted peer.
const base = "client=127.0.0.1 host=api.example.com path=/login"

var spellings = []spelling{
	{name: "plain", want: base},

	// Hosts: read as nginx selects a server; unreadable ones are refused.
	{name: "host empty", noHost: true, want: "refused"},
	{name: "host [x", host: "[x", want: "refused"},
	{name: "host [api.example.com", host: "[api.example.com", want: "refused"},
	{name: "host upper case, trailing dot", host: "API.Example.com.", want: base},
	{name: "host with port", host: "api.example.com:8080", want: base},
	// nginx routes it to api.example.com; the check process's server
	// (fasthttp) refuses it as the Host of the Envoy route's own request.
	{name: "host with two ports", host: "api.example.com:1:2", want: base, serverRefuses: []string{envoyHTTP}},
	{name: "host IPv6 literal", host: "[::1]:80", want: "client=127.0.0.1 path=/login"},
	{name: "host IDN as punycode", host: "xn--bcher-kva.example.com", want: "client=127.0.0.1 path=/login"},
	{name: "host IDN as UTF-8", host: "bücher.example.com", want: "refused"},
	{name: "host with control byte", host: "api.example.com\x01", want: "refused"},

	// Paths: every reading a router may take; {path} is the decoded one.
	{name: "path encoded slashes", target: "/api/x%2F..%2F..%2Fpub", want: "client=127.0.0.1 host=api.example.com path=/pub"},
	{name: "path dot segments", target: "/a/../login", want: base},
	{name: "path double slash", target: "//login", want: base},
	{name: "path encoded dots", target: "/%2e%2e/login", want: base},
	{name: "path encoded dots under /api/", target: "/api/%2e%2e/pub", want: "client=127.0.0.1 host=api.example.com path=/pub"},
	{name: "path encoded letter", target: "/%6Cogin", want: base},
	{name: "path raw query", target: "/login?next=/api/x&a=%2F", want: base},
	{name: "path fragment", target: "/login#x", want: base},
	{name: "path over 16 KiB", target: "/login?q=" + strings.Repeat("q", policy.MaxURLBytes), want: "refused"},
	{name: "path bad escape", target: "/login%zz", want: "refused"},
	{name: "path trailing escape", target: "/login%", want: "refused"},

	// Methods: tokens in upper case, as nginx accepts them.
	{name: "method GET", method: "GET", want: base},
	{name: "method HEAD", method: "HEAD", want: base},
	{name: "method POST", method: "POST", want: "client=127.0.0.1 host=api.example.com method=POST path=/login"},
	{name: "method get", method: "get", want: "refused"},
	{name: "method post", method: "post", want: "refused"},
	{name: "method Post", method: "Post", want: "refused"},
	{name: "method with hyphen", method: "VERSION-CONTROL", want: base},
	{name: "method with underscore", method: "M_SEARCH", want: base},
	{name: "method with dot", method: "G.T", want: "refused"},
	{name: "method too long", method: strings.Repeat("A", 33), want: "refused"},
	{name: "method non-ASCII", method: "GÉT", want: "refused"},

	// Headers: names in any case, values exact; the key reads the first
	// of repeated lines.
	{name: "header", header: [][2]string{{"X-Plan", "gold"}}, want: "client=127.0.0.1 host=api.example.com path=/login plan=gold"},
	{name: "header name lower case", header: [][2]string{{"x-plan", "gold"}}, want: "client=127.0.0.1 host=api.example.com path=/login plan=gold"},
	{name: "header value upper case", header: [][2]string{{"X-Plan", "GOLD"}}, want: base},
	{name: "header repeated", header: [][2]string{{"X-Plan", "gold"}, {"X-Plan", "silver"}}, want: "client=127.0.0.1 host=api.example.com path=/login plan=gold"},
	{name: "header empty", header: [][2]string{{"X-Plan", ""}}, want: base},
	{name: "header oversize", header: [][2]string{{"X-Big", strings.Repeat("b", policy.MaxHeaderBytes+1)}}, want: "refused"},
	{name: "headers oversize together", header: [][2]string{{"X-Big", strings.Repeat("b", policy.MaxHeaderBytes/2)}, {"X-Big", strings.Repeat("b", policy.MaxHeaderBytes/2)}}, want: "refused"},
	{name: "key header missing", target: "/tenant/a", want: "denied"},
	{name: "key header present", target: "/tenant/a", header: [][2]string{{"X-Tenant", "t1"}}, want: "client=127.0.0.1 host=api.example.com tenant=t1"},

	// Client addresses: forwarded headers only from trusted peers, read
	// from the right.
	{name: "XFF from trusted peer", header: [][2]string{{"X-Forwarded-For", "203.0.113.7"}}, jsonClientIP: "203.0.113.7", want: "client=203.0.113.7 host=api.example.com path=/login"},
	{name: "XFF chain", header: [][2]string{{"X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.0.0.2"}}, want: "client=203.0.113.7 host=api.example.com path=/login"},
	{name: "XFF lines", header: [][2]string{{"X-Forwarded-For", "198.51.100.1"}, {"X-Forwarded-For", "203.0.113.7"}}, want: "client=203.0.113.7 host=api.example.com path=/login"},
	{name: "XFF from untrusted peer", untrusted: true, header: [][2]string{{"X-Forwarded-For", "203.0.113.7"}}, jsonClientIP: untrustedPeer, want: "client=127.0.0.2 host=api.example.com path=/login"},
	{name: "untrusted peer", untrusted: true, want: "client=127.0.0.2 host=api.example.com path=/login"},
	{name: "X-Real-IP", header: [][2]string{{"X-Real-IP", "203.0.113.8"}}, jsonClientIP: "203.0.113.8", want: "client=203.0.113.8 host=api.example.com path=/login"},
	{name: "XFF before X-Real-IP", header: [][2]string{{"X-Real-IP", "203.0.113.8"}, {"X-Forwarded-For", "203.0.113.7"}}, want: "client=203.0.113.7 host=api.example.com path=/login"},
	{name: "XFF IPv4-mapped", header: [][2]string{{"X-Forwarded-For", "::ffff:203.0.113.7"}}, jsonClientIP: "::ffff:203.0.113.7", want: "client=203.0.113.7 host=api.example.com path=/login"},
	{name: "XFF IPv6 with port", header: [][2]string{{"X-Forwarded-For", "[2001:db8::1]:443"}}, want: "client=2001:db8::1 host=api.example.com path=/login"},
	{name: "XFF IPv6 with zone", header: [][2]string{{"X-Forwarded-For", "2001:db8::1%eth0"}}, jsonClientIP: "2001:db8::1%eth0", want: "client=2001:db8::1 host=api.example.com path=/login"},
	{name: "XFF garbage", header: [][2]string{{"X-Forwarded-For", "garbage"}}, want: base},
	{name: "XFF garbage left of client", header: [][2]string{{"X-Forwarded-For", "garbage, 203.0.113.7"}}, want: "client=203.0.113.7 host=api.example.com path=/login"},
}

// outcome is an intake's decision on one spelling.
type outcome struct {
	decision string // as spelling.want
	detail   string // the answer, for the failure message
}

const envoyHTTP = "Envoy ext_authz HTTP"

// intake sends a spelling through one way of asking. ok is false when the
// intake cannot express the spelling.
type intake struct {
	name string
	send func(t *testing.T, s spelling) (o outcome, ok bool)
}

func TestIntakesDecideAlike(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client()
	h := startIntakes(t, rs)
	for _, s := range spellings {
		t.Run(s.name, func(t *testing.T) {
			for _, in := range h.intakes {
				if err := rdb.FlushDB(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				o, ok := in.send(t, s)
				if !ok {
					continue
				}
				if o.decision == "allowed" {
					o.decision = charged(t, rdb)
				}
				want := s.want
				if slices.Contains(s.serverRefuses, in.name) {
					want = "refused"
				}
				if o.decision != want {
					t.Errorf("%s: %s, want %s (%s)", in.name, o.decision, want, o.detail)
				}
			}
		})
	}
}

// charged lists the buckets in Redis as "policy=key", in policy order.
func charged(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "sluice:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		// sluice:v2:{shop/<policy>/<key>}
		inner := k[strings.IndexByte(k, '{')+1 : strings.LastIndexByte(k, '}')]
		_, rest, _ := strings.Cut(inner, "/")
		name, key, _ := strings.Cut(rest, "/")
		if k, err := url.PathUnescape(key); err == nil { // the key value's encoding (ratelimit.Key)
			key = k
		}
		out = append(out, name+"="+key)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "allowed, nothing charged"
	}
	return strings.Join(out, " ")
}

type intakes struct {
	intakes []intake
}

func startIntakes(t *testing.T, rs *redistest.Server) *intakes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var yamlDocs []string
	var compiled []*policy.Policy
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range intakePolicies {
			if !yield(k) {
				return
			}
		}
	}) {
		specText := intakePolicies[name] + intakeLimit
		compiled = append(compiled, policytest.Compile(t, "shop", name, specText))
		doc := "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: " + name + "}\nspec:\n  " +
			strings.ReplaceAll(strings.TrimSpace(specText), "\n", "\n  ") + "\n"
		yamlDocs = append(yamlDocs, doc)
	}
	// Generous store deadlines: a loaded machine must not turn a decision
	// into a failure mode's.
	const storeTimeout = 5 * time.Second
	checker := checktest.New(t, check.Options{Backend: storetest.Redis(t, rs.Addr()).Backend(), Timeout: storeTimeout, DenyCacheSize: -1}, compiled...)
	trusted := intakeTrusted(t)

	// The HTTP check endpoint, on the check process's own server.
	ep, err := webhook.New(webhook.Options{Checker: checker, TrustedProxies: trusted})
	if err != nil {
		t.Fatal(err)
	}
	httpLn, err := net.Listen("tcp", trustedPeer+":0")
	if err != nil {
		t.Fatal(err)
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpserve.Serve(ctx, httpLn, ep) }()
	httpAddr := httpLn.Addr().String()

	// ext_authz over gRPC.
	gs, err := grpcserver.New(grpcserver.Options{Checker: checker, TrustedProxies: trusted, DefaultNamespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	grpcLn, err := net.Listen("tcp", trustedPeer+":0")
	if err != nil {
		t.Fatal(err)
	}
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- gs.Serve(ctx, grpcLn) }()
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	authz := authv3.NewAuthorizationClient(conn)

	// The middleware in the process (its own client of the same Redis)
	// and remotely (asking the endpoint above), each in front of a
	// handler that answers 200, on net/http's server as a service runs it.
	local, err := middleware.New(middleware.WithPolicyYAML(strings.Join(yamlDocs, "---\n")), middleware.WithNamespace("shop"),
		middleware.WithRedisURL("redis://"+rs.Addr()), middleware.WithStoreTimeout(storeTimeout), middleware.WithTrustedProxies(trusted))
	if err != nil {
		t.Fatal(err)
	}
	remote, err := middleware.New(middleware.WithRemote(middleware.RemoteOptions{URL: "http://" + httpAddr, Timeout: storeTimeout, FailureMode: ratelimitv1alpha1.FailureModeClosed}),
		middleware.WithNamespace("shop"), middleware.WithTrustedProxies(trusted))
	if err != nil {
		t.Fatal(err)
	}
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	localAddr := serveNetHTTP(ctx, t, local.Handler(served))
	remoteAddr := serveNetHTTP(ctx, t, remote.Handler(served))

	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
		if err := <-httpDone; err != nil {
			t.Errorf("http Serve: %v", err)
		}
		if err := <-grpcDone; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
		_ = local.Close()
		_ = remote.Close()
	})

	return &intakes{intakes: []intake{
		{"nginx auth-url", func(t *testing.T, s spelling) (outcome, bool) {
			hs := append([][2]string{{"X-Original-URL", "http://" + s.authority() + s.path()}, {"X-Original-Method", s.verb()}}, s.header...)
			return rawHTTP(t, httpAddr, s.peer(), "GET", "/check/shop", "check.local", hs), true
		}},
		{"ForwardAuth", func(t *testing.T, s spelling) (outcome, bool) {
			hs := append([][2]string{{"X-Forwarded-Method", s.verb()}, {"X-Forwarded-Proto", "http"}, {"X-Forwarded-Host", s.authority()}, {"X-Forwarded-Uri", s.path()}}, s.header...)
			return rawHTTP(t, httpAddr, s.peer(), "GET", "/check/shop", "check.local", hs), true
		}},
		{envoyHTTP, func(t *testing.T, s spelling) (outcome, bool) {
			return rawHTTP(t, httpAddr, s.peer(), s.verb(), "/envoy/shop"+s.path(), s.authority(), s.header), true
		}},
		{"POST /v1/check", func(t *testing.T, s spelling) (outcome, bool) {
			return jsonCheck(t, httpAddr, s)
		}},
		{"ext_authz gRPC", func(t *testing.T, s spelling) (outcome, bool) {
			return grpcCheck(t, authz, s), true
		}},
		{"middleware", func(t *testing.T, s spelling) (outcome, bool) {
			return rawHTTP(t, localAddr, s.peer(), s.verb(), s.path(), s.authority(), s.header), true
		}},
		{"middleware WithRemote", func(t *testing.T, s spelling) (outcome, bool) {
			return rawHTTP(t, remoteAddr, s.peer(), s.verb(), s.path(), s.authority(), s.header), true
		}},
	}}
}

func (s spelling) verb() string {
	if s.method == "" {
		return "GET"
	}
	return s.method
}

func (s spelling) authority() string {
	if s.host == "" && !s.noHost {
		return "api.example.com"
	}
	return s.host
}

func (s spelling) path() string {
	if s.target == "" {
		return "/login"
	}
	return s.target
}

// forwards reports whether the spelling carries a forwarded address.
func (s spelling) forwards() bool {
	return slices.ContainsFunc(s.header, func(h [2]string) bool {
		return strings.EqualFold(h[0], "X-Forwarded-For") || strings.EqualFold(h[0], "X-Real-IP")
	})
}

// serveNetHTTP serves h on a loopback port with net/http's server until
// ctx ends.
func serveNetHTTP(ctx context.Context, t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", trustedPeer+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr().String()
}

// rawHTTP sends one request as written, from the peer address, and reads
// the decision from the answer.
func rawHTTP(t *testing.T, addr, peer, method, target, host string, header [][2]string) outcome {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(peer)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	for _, h := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, target, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return statusOutcome(resp.StatusCode, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body.String())))
}

// statusOutcome classes an HTTP answer: 2xx allows; 400 and 431 refuse a
// request that cannot be read; 403 and 429 deny.
func statusOutcome(status int, detail string) outcome {
	switch {
	case status >= 200 && status < 300:
		return outcome{"allowed", detail}
	case status == http.StatusBadRequest || status == http.StatusRequestHeaderFieldsTooLarge:
		return outcome{"refused", detail}
	case status == http.StatusForbidden || status == http.StatusTooManyRequests:
		return outcome{"denied", detail}
	}
	return outcome{fmt.Sprintf("status %d", status), detail}
}

// jsonCheck asks POST /v1/check, with the client's address as its caller
// would know it.
func jsonCheck(t *testing.T, addr string, s spelling) (outcome, bool) {
	t.Helper()
	if s.noHost {
		return outcome{}, false // request.host is optional: no host is a request without one
	}
	clientIP := s.jsonClientIP
	if clientIP == "" {
		if s.forwards() {
			return outcome{}, false // the caller resolves forwarded chains itself
		}
		clientIP = s.peer()
	}
	headers := map[string]string{}
	for _, h := range s.header {
		if _, dup := headers[http.CanonicalHeaderKey(h[0])]; dup {
			return outcome{}, false // a JSON object has one value per name
		}
		headers[http.CanonicalHeaderKey(h[0])] = h[1]
	}
	body, err := json.Marshal(webhook.CheckRequest{Namespace: "shop", Request: webhook.OriginalRequest{
		Method: s.verb(), Host: s.authority(), Path: s.path(), Headers: headers, ClientIP: clientIP,
	}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/check", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text bytes.Buffer
	_, _ = text.ReadFrom(resp.Body)
	detail := fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(text.String()))
	if resp.StatusCode != http.StatusOK {
		return statusOutcome(resp.StatusCode, detail), true
	}
	var answer webhook.CheckResponse
	if err := json.Unmarshal(text.Bytes(), &answer); err != nil {
		t.Fatalf("%s: %v", detail, err)
	}
	if !answer.Allowed {
		return outcome{"denied", detail}, true
	}
	return outcome{"allowed", detail}, true
}

// grpcCheck asks ext_authz as Envoy does with encode_raw_headers (one
// header_map entry per line, as sent), the source address being the peer.
func grpcCheck(t *testing.T, authz authv3.AuthorizationClient, s spelling) outcome {
	t.Helper()
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":authority", RawValue: []byte(s.authority())},
		{Key: ":method", RawValue: []byte(s.verb())},
		{Key: ":path", RawValue: []byte(s.path())},
	}}
	for _, h := range s.header {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(h[0]), RawValue: []byte(h[1])})
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: s.peer(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: s.verb(), Host: s.authority(), Path: s.path(), Scheme: "http", Protocol: "HTTP/1.1", HeaderMap: hm,
		}},
	}}
	resp, err := authz.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if ok := resp.GetOkResponse(); ok != nil {
		return outcome{"allowed", "ok_response"}
	}
	d := resp.GetDeniedResponse()
	return statusOutcome(int(d.GetStatus().GetCode()), fmt.Sprintf("%d %s", d.GetStatus().GetCode(), d.GetBody()))
}
