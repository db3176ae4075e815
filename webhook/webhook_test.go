package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// compile is policytest.Compile, short for this package's many specs.
var compile = policytest.Compile

// endpoint is a check endpoint served as the check process serves it
// (internal/httpserve: fasthttp, with the check routes native).
type endpoint struct {
	URL     string
	server  *CheckEndpoint
	checker *check.Checker
	source  *check.StaticSource
}

func newEndpoint(t testing.TB, store ratelimit.Backend, opts Options, policies ...*policy.Policy) *endpoint {
	t.Helper()
	src := check.NewStaticSource(policies...)
	c := check.New(check.Options{Backend: store, Source: src, Timeout: 50 * time.Millisecond, BreakerCooldown: 200 * time.Millisecond})
	opts.Checker = c
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &endpoint{URL: serveFast(t, s), server: s, checker: c, source: src}
}

// serveFast serves h with httpserve, as the check process does, until the
// test ends, and returns its URL.
func serveFast(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpserve.Serve(ctx, ln, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

// serveNetHTTP serves h with net/http until the test ends, and returns
// its URL.
func serveNetHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// redisStore starts a redis-server for the test and returns it and a
// store over it.
func redisStore(t testing.TB) (*redistest.Server, *redisstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, storetest.Redis(t, srv.Addr())
}

func do(t testing.TB, method, url string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// The headers each proxy sends, exactly as it sends them.
var proxies = []struct {
	name       string
	path       func(ns string) string
	method     string
	headers    map[string]string
	denyStatus int
}{
	{
		name:   "ingress-nginx auth-url",
		path:   func(ns string) string { return "/check/" + ns },
		method: http.MethodGet,
		headers: map[string]string{
			"X-Original-URL":          "https://shop.example.com/api/items?page=2",
			"X-Original-Method":       "POST",
			"X-Sent-From":             "nginx-ingress-controller",
			"X-Real-IP":               "198.51.100.7",
			"X-Forwarded-For":         "198.51.100.7",
			"X-Forwarded-Host":        "shop.example.com",
			"X-Forwarded-Proto":       "https",
			"X-Auth-Request-Redirect": "/api/items?page=2",
		},
		denyStatus: http.StatusForbidden,
	},
	{
		name:   "Caddy forward_auth",
		path:   func(ns string) string { return "/check/" + ns },
		method: http.MethodGet,
		headers: map[string]string{
			"X-Forwarded-Method": "POST",
			"X-Forwarded-Uri":    "/api/items?page=2",
			"X-Forwarded-Host":   "shop.example.com",
			"X-Forwarded-Proto":  "https",
			"X-Forwarded-For":    "198.51.100.7",
		},
		denyStatus: http.StatusTooManyRequests,
	},
	{
		name:   "Traefik ForwardAuth",
		path:   func(ns string) string { return "/check/" + ns },
		method: http.MethodGet,
		headers: map[string]string{
			"X-Forwarded-Method": "POST",
			"X-Forwarded-Proto":  "https",
			"X-Forwarded-Host":   "shop.example.com",
			"X-Forwarded-Uri":    "/api/items?page=2",
			"X-Forwarded-For":    "198.51.100.7",
			"X-Forwarded-Port":   "443",
			"X-Forwarded-Server": "traefik-7d9f",
			"X-Real-Ip":          "198.51.100.7",
		},
		denyStatus: http.StatusTooManyRequests,
	},
	{
		name:   "Envoy ext_authz",
		path:   func(ns string) string { return "/envoy/" + ns + "/api/items?page=2" },
		method: http.MethodPost,
		headers: map[string]string{
			"Host":              "shop.example.com",
			"X-Forwarded-For":   "198.51.100.7",
			"X-Forwarded-Proto": "https",
			"X-Envoy-Internal":  "true",
		},
		denyStatus: http.StatusTooManyRequests,
	},
}

const shopPolicy = `
match:
  hosts: [shop.example.com]
  paths: ["/api/*"]
  methods: [POST]
key: "{client_ip}"
limits:
- name: burst
  tokenBucket: {capacity: 3, refillRate: 1, refillInterval: 10s}
`

func TestProxyProfiles(t *testing.T) {
	_, store := redisStore(t)
	for i, px := range proxies {
		t.Run(px.name, func(t *testing.T) {
			ns := "shop" + strconv.Itoa(i)
			ep := newEndpoint(t, store.Backend(), Options{}, compile(t, ns, "api", shopPolicy))
			type step struct {
				status                    int
				rateLimit, retryAfter     string
				legacyRemaining, legacyOf string
			}
			want := []step{
				{200, `"api/burst";r=2;t=10`, "", "2", "3"},
				{200, `"api/burst";r=1;t=20`, "", "1", "3"},
				{200, `"api/burst";r=0;t=30`, "", "0", "3"},
				{px.denyStatus, `"api/burst";r=0;t=30`, "10", "0", "3"},
				{px.denyStatus, `"api/burst";r=0;t=30`, "10", "0", "3"},
			}
			for n, w := range want {
				start := time.Now()
				resp, body := do(t, px.method, ep.URL+px.path(ns), px.headers)
				if resp.StatusCode != w.status {
					t.Fatalf("request %d: status %d, want %d (body %s)", n+1, resp.StatusCode, w.status, body)
				}
				if got := resp.Header.Get("RateLimit"); got != w.rateLimit {
					t.Errorf("request %d: RateLimit %q, want %q", n+1, got, w.rateLimit)
				}
				if got := resp.Header.Get("RateLimit-Policy"); got != `"api/burst";q=3;w=30` {
					t.Errorf("request %d: RateLimit-Policy %q", n+1, got)
				}
				if got := resp.Header.Get("Retry-After"); got != w.retryAfter {
					t.Errorf("request %d: Retry-After %q, want %q", n+1, got, w.retryAfter)
				}
				if got := resp.Header.Get("X-RateLimit-Remaining"); got != w.legacyRemaining {
					t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", n+1, got, w.legacyRemaining)
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); got != w.legacyOf {
					t.Errorf("request %d: X-RateLimit-Limit %q, want %q", n+1, got, w.legacyOf)
				}
				reset, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
				if lo, hi := start.Unix()+10, time.Now().Unix()+31; reset < lo || reset > hi {
					t.Errorf("request %d: X-RateLimit-Reset %d outside [%d, %d]", n+1, reset, lo, hi)
				}
				if w.status != 200 {
					if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("deny Content-Type %q", ct)
					}
					var p checkhttp.Problem
					if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != w.status || p.Policy != ns+"/api" || p.Limit != "burst" || p.RetryAfter == nil || *p.RetryAfter != 10 {
						t.Errorf("deny body %s (err %v)", body, err)
					}
				}
			}
			// Another client has its own bucket; a request outside the match is not limited.
			other := cloneHeaders(px.headers)
			other["X-Forwarded-For"] = "198.51.100.8"
			other["X-Real-IP"] = "198.51.100.8"
			if resp, _ := do(t, px.method, ep.URL+px.path(ns), other); resp.StatusCode != 200 {
				t.Errorf("another client: status %d, want 200", resp.StatusCode)
			}
		})
	}
}

func cloneHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

func TestUnmatchedRequestsAreAllowedWithoutHeaders(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "api", shopPolicy))
	resp, _ := do(t, "GET", ep.URL+"/check/shop", map[string]string{
		"X-Original-URL": "https://shop.example.com/static/logo.png", "X-Original-Method": "GET",
	})
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
		t.Fatalf("status %d RateLimit %q; want 200 without headers", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

func TestBadRequestsNameTheHeader(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "api", shopPolicy))
	routes := map[string]string{"native": ep.URL, "net/http": serveNetHTTP(t, ep.server)}
	tests := []struct {
		name    string
		path    string
		headers map[string]string
		want    string
	}{
		{"no proxy headers", "/check/shop", nil, "X-Original-URL: missing"},
		{"nginx without method", "/check/shop", map[string]string{"X-Original-URL": "http://h/"}, "X-Original-Method: missing"},
		{"nginx relative URL", "/check/shop", map[string]string{"X-Original-URL": "/login", "X-Original-Method": "GET"}, "X-Original-URL: not an absolute URL"},
		{"nginx bad escape", "/check/shop", map[string]string{"X-Original-URL": "http://h/a%zz", "X-Original-Method": "GET"}, "X-Original-URL"},
		{"nginx bad method", "/check/shop", map[string]string{"X-Original-URL": "http://h/", "X-Original-Method": "G E T"}, "X-Original-Method"},
		{"forwardauth without host", "/check/shop", map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/"}, "X-Forwarded-Host: missing"},
		{"forwardauth without uri", "/check/shop", map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Host": "h"}, "X-Forwarded-Uri: missing"},
		{"url of 20 KiB", "/check/shop", map[string]string{"X-Original-URL": "http://h/" + strings.Repeat("a", 20<<10), "X-Original-Method": "GET"}, "X-Original-URL: longer than"},
		// Over the check process's header limit (httpserve.MaxHeaderBytes):
		// its server answers 431 before the route sees it.
		{"url of 100 KiB", "/check/shop", map[string]string{"X-Original-URL": "http://h/" + strings.Repeat("a", 100<<10), "X-Original-Method": "GET"}, "X-Original-URL: longer than"},
	}
	for _, tt := range tests {
		for route, url := range routes {
			t.Run(tt.name+"/"+route, func(t *testing.T) {
				resp, body := do(t, "GET", url+tt.path, tt.headers)
				if route == "native" && len(tt.headers["X-Original-URL"]) > httpserve.MaxHeaderBytes {
					if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
						t.Fatalf("status %d body %.200s; want 431", resp.StatusCode, body)
					}
					return
				}
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tt.want) {
					t.Fatalf("status %d body %.200s; want 400 naming %q", resp.StatusCode, body, tt.want)
				}
			})
		}
	}
}

func TestPathIsNormalizedBeforeMatching(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "login", `
match: {paths: [/login]}
key: global
limits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]
`))
	// Every spelling of /login counts against the same limit.
	for i, u := range []string{"http://h/login", "http://h//login", "http://h/x/../login", "http://h/%6Cogin", "http://h/./login"} {
		resp, _ := do(t, "GET", ep.URL+"/check/shop", map[string]string{"X-Original-URL": u, "X-Original-Method": "GET"})
		want := 403
		if i == 0 {
			want = 200
		}
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", u, resp.StatusCode, want)
		}
	}
}

func TestUntrustedPeerCannotChooseItsKey(t *testing.T) {
	onlyTenNet, err := clientip.ParseTrustedProxies([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	ep := newEndpoint(t, memstore.New().Backend(), Options{TrustedProxies: onlyTenNet}, compile(t, "shop", "ip", `
limits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]
`))
	// The test client (127.0.0.1) is not trusted here: whatever it claims,
	// its key is its own address, so changing the claim gains nothing.
	statuses := []int{}
	for i := 0; i < 4; i++ {
		ip := "203.0.113." + strconv.Itoa(i)
		resp, _ := do(t, "GET", ep.URL+"/check/shop", map[string]string{
			"X-Original-URL": "http://h/", "X-Original-Method": "GET", "X-Forwarded-For": ip, "X-Real-IP": ip,
		})
		statuses = append(statuses, resp.StatusCode)
	}
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 403 || statuses[3] != 403 {
		t.Fatalf("statuses %v, want [200 200 403 403]", statuses)
	}
}

func TestJSONCheck(t *testing.T) {
	_, store := redisStore(t)
	ep := newEndpoint(t, store.Backend(), Options{}, compile(t, "shop", "api", shopPolicy))
	post := func(body string) (int, CheckResponse) {
		resp, err := http.Post(ep.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out CheckResponse
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
		} else {
			out.Error = string(b)
		}
		return resp.StatusCode, out
	}
	body := `{"namespace":"shop","request":{"method":"POST","host":"shop.example.com","path":"/api/x","clientIP":"192.0.2.1"}`
	// Dry runs report without consuming.
	for i := 0; i < 5; i++ {
		status, out := post(body + `,"dryRun":true}`)
		if status != 200 || !out.Allowed || len(out.Policies) != 1 || out.Policies[0].Limits[0].Remaining != 2 {
			t.Fatalf("dry run %d: %d %+v", i, status, out)
		}
	}
	status, out := post(body + `,"cost":3}`)
	if status != 200 || !out.Allowed || out.Policies[0].Key != "192.0.2.1" || out.Policies[0].Limits[0].Remaining != 0 ||
		out.Policies[0].Limits[0].RedisKey != "sluice:v2:{shop/api/192.0.2.1}" || out.Policies[0].Limits[0].RedisField != "burst" ||
		out.Policies[0].Limits[0].Algorithm != "TokenBucket" {
		t.Fatalf("cost 3: %d %+v", status, out)
	}
	status, out = post(body + `}`)
	if status != 200 || out.Allowed || out.RetryAfterSeconds == nil || *out.RetryAfterSeconds != 10 {
		t.Fatalf("after cost 3: %d %+v", status, out)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"namespace":"shop","request":{"method":"POST","path":"/x","clientIP":"not-an-ip"}}`, "request.clientIP"},
		{`{"namespace":"shop","request":{"path":"x"}}`, "request.path"},
		{`{"request":{"path":"/x"}}`, "namespace: required"},
		{`{"namespace":"shop","request":{},"bogus":1}`, "unknown field"},
		{`{"namespace":"shop","policy":"nope","request":{}}`, "no such policy"},
	} {
		if status, out := post(bad.body); status/100 != 4 || !strings.Contains(out.Error, bad.want) {
			t.Errorf("%s: status %d %q, want 4xx naming %q", bad.body, status, out.Error, bad.want)
		}
	}
}

func TestMissingKeyModes(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{},
		compile(t, "ns", "deny", "key: '{header:X-Api-Key}'\nonMissingKey: Deny\nmatch: {paths: [/deny]}\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
		compile(t, "ns", "skip", "key: '{header:X-Api-Key}'\nonMissingKey: Skip\nmatch: {paths: [/skip]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "ns", "shared", "key: '{header:X-Api-Key}'\nonMissingKey: Shared\nmatch: {paths: [/shared]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	get := func(path string, key string) int {
		h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": path, "X-Forwarded-Host": "h"}
		if key != "" {
			h["X-Api-Key"] = key
		}
		resp, _ := do(t, "GET", ep.URL+"/check/ns", h)
		return resp.StatusCode
	}
	if s := get("/deny", ""); s != 429 {
		t.Errorf("Deny without key: %d, want 429", s)
	}
	if s := get("/deny", "k1"); s != 200 {
		t.Errorf("Deny with key: %d, want 200", s)
	}
	if a, b := get("/skip", ""), get("/skip", ""); a != 200 || b != 200 {
		t.Errorf("Skip without key: %d %d, want 200 200", a, b)
	}
	if a, b, c := get("/shared", ""), get("/shared", ""), get("/shared", "own"); a != 200 || b != 429 || c != 200 {
		t.Errorf("Shared: %d %d %d, want 200 429 200", a, b, c)
	}
}

func TestShadowModeNeverDenies(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "ns", "trial", "mode: Shadow\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	for i := 0; i < 3; i++ {
		resp, body := do(t, "GET", ep.URL+"/check/ns", map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"})
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("request %d: %d %s (headers %v)", i, resp.StatusCode, body, resp.Header)
		}
	}
}

func TestDenyStatusOverride(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "ns", "p", "key: global\nresponse: {denyStatus: 503, headers: Legacy}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	h := map[string]string{"X-Original-URL": "http://h/", "X-Original-Method": "GET"}
	do(t, "GET", ep.URL+"/check/ns", h)
	resp, _ := do(t, "GET", ep.URL+"/check/ns", h)
	if resp.StatusCode != 503 || resp.Header.Get("RateLimit") != "" || resp.Header.Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("status %d headers %v; want 503 with legacy headers only", resp.StatusCode, resp.Header)
	}
}

func TestOnePolicyRoute(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{},
		compile(t, "ns", "a", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "ns", "b", "key: global\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"))
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"}
	for i := 0; i < 3; i++ {
		if resp, _ := do(t, "GET", ep.URL+"/check/ns/b", h); resp.StatusCode != 200 {
			t.Fatalf("policy b request %d: %d", i, resp.StatusCode)
		}
	}
	if resp, body := do(t, "GET", ep.URL+"/check/ns/missing", h); resp.StatusCode != 404 {
		t.Fatalf("unknown policy: %d %s", resp.StatusCode, body)
	}
}

func TestDeniedKeysAreAnsweredFromTheCache(t *testing.T) {
	srv, store := redisStore(t)
	ep := newEndpoint(t, store.Backend(), Options{}, compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"}
	for i := 0; i < 3; i++ {
		do(t, "GET", ep.URL+"/check/ns", h)
	}
	before := commandsProcessed(t, srv)
	for i := 0; i < 100; i++ {
		if resp, _ := do(t, "GET", ep.URL+"/check/ns", h); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("cached denial %d: %d", i, resp.StatusCode)
		}
	}
	if n := commandsProcessed(t, srv) - before; n > 2 { // the INFO call itself counts
		t.Fatalf("100 denied requests sent %d commands to Redis, want none", n)
	}
	// A policy change drops the cache: the new, larger limit applies at once.
	ep.source.Set(compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"))
	if resp, _ := do(t, "GET", ep.URL+"/check/ns", h); resp.StatusCode != 200 {
		t.Fatalf("after raising the limit: %d, want 200", resp.StatusCode)
	}
}

func commandsProcessed(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// With ReportPolicy, every answer a policy decided names it in
// X-Sluice-Policy, on the native routes and through net/http alike;
// without it, no answer does.
func TestReportPolicyHeader(t *testing.T) {
	p := compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]")
	h := map[string]string{"X-Original-URL": "http://h/", "X-Original-Method": "GET"}
	for _, report := range []bool{true, false} {
		for _, server := range []string{"native", "net/http"} {
			ep := newEndpoint(t, memstore.New().Backend(), Options{ReportPolicy: report}, p)
			url := ep.URL
			if server == "net/http" {
				url = serveNetHTTP(t, ep.server)
			}
			for _, want := range []string{"ns/p;decision=allowed;reason=Allowed;limit=l;remaining=0;key=", "ns/p;decision=denied;reason=RateLimited;limit=l;remaining=0;key="} {
				resp, _ := do(t, "GET", url+"/check/ns", h)
				got := resp.Header.Get("X-Sluice-Policy")
				if report && !strings.HasPrefix(got, want) || !report && got != "" {
					t.Errorf("%s, report %t: X-Sluice-Policy %q, want %q…", server, report, got, want)
				}
			}
		}
	}
}
