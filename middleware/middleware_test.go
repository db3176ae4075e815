package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/middleware"
)

const shopPolicy = `
match:
  paths: ["/api/*"]
key: "{client_ip}"
limits:
- name: burst
  tokenBucket: {capacity: 3, refillRate: 1, refillInterval: 10s}
`

// TestSequence runs the same requests through each mode: three allowed,
// then denials with exact headers and a problem body, the next handler
// never called for a denial; another client and an unmatched path are
// not limited. The remote mode relays what the check endpoint answers,
// so the three modes answer alike.
func TestSequence(t *testing.T) {
	type step struct {
		status                int
		rateLimit, retryAfter string
		remaining             string
	}
	want := []step{
		{200, `"api/burst";r=2;t=10`, "", "2"},
		{200, `"api/burst";r=1;t=20`, "", "1"},
		{200, `"api/burst";r=0;t=30`, "", "0"},
		{429, `"api/burst";r=0;t=30`, "10", "0"},
		{429, `"api/burst";r=0;t=30`, "10", "0"},
	}
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			l := m.new(t, []named{{"api", shopPolicy}})
			a := &app{}
			h := l.Handler(a)
			policyName := "default/api"
			if m.name == "remote" {
				policyName = "shop/api"
			}
			for n, w := range want {
				start := time.Now()
				rec := send(h, "GET", "http://shop.example.com/api/items?page=2", "198.51.100.7:40000", nil)
				if rec.Code != w.status {
					t.Fatalf("request %d: status %d, want %d (body %s)", n+1, rec.Code, w.status, rec.Body)
				}
				hdr := rec.Header()
				// The draft's spelling, as sent: not Go's canonical "Ratelimit".
				if got := strings.Join(hdr["RateLimit"], ","); got != w.rateLimit {
					t.Errorf("request %d: RateLimit %q, want %q", n+1, got, w.rateLimit)
				}
				if got := strings.Join(hdr["RateLimit-Policy"], ","); got != `"api/burst";q=3;w=30` {
					t.Errorf("request %d: RateLimit-Policy %q", n+1, got)
				}
				if got := hdr.Get("Retry-After"); got != w.retryAfter {
					t.Errorf("request %d: Retry-After %q, want %q", n+1, got, w.retryAfter)
				}
				if got := exact(hdr, "X-RateLimit-Limit"); got != "3" {
					t.Errorf("request %d: X-RateLimit-Limit %q, want 3", n+1, got)
				}
				if got := exact(hdr, "X-RateLimit-Remaining"); got != w.remaining {
					t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", n+1, got, w.remaining)
				}
				reset, _ := strconv.ParseInt(exact(hdr, "X-RateLimit-Reset"), 10, 64)
				if lo, hi := start.Unix()+10, time.Now().Unix()+31; reset < lo || reset > hi {
					t.Errorf("request %d: X-RateLimit-Reset %d outside [%d, %d]", n+1, reset, lo, hi)
				}
				if w.status == 200 {
					if rec.Body.String() != "hello\n" {
						t.Errorf("request %d: body %q, want the app's", n+1, rec.Body)
					}
					continue
				}
				p := decodeProblem(t, rec)
				if p.Type != "https://sluice.dev/problems/rate-limited" || p.Status != 429 || p.Policy != policyName ||
					p.Limit != "burst" || p.RetryAfter == nil || *p.RetryAfter != 10 ||
					p.Detail != `limit "burst" of policy `+policyName+` is exhausted; retry in 10s` {
					t.Errorf("request %d: problem %+v", n+1, p)
				}
			}
			if got := a.calls.Load(); got != 3 {
				t.Errorf("the app served %d requests, want 3", got)
			}
			if rec := send(h, "GET", "http://shop.example.com/api/items", "198.51.100.8:40000", nil); rec.Code != 200 {
				t.Errorf("another client: status %d, want 200", rec.Code)
			}
			rec := send(h, "GET", "http://shop.example.com/about", "198.51.100.7:40000", nil)
			if rec.Code != 200 || exact(rec.Header(), "RateLimit") != "" || exact(rec.Header(), "X-RateLimit-Limit") != "" {
				t.Errorf("unmatched path: status %d, headers %v; want 200 without rate-limit headers", rec.Code, rec.Header())
			}
		})
	}
}

// TestHeaderStyles: each response.headers style sends its headers and no
// others; Retry-After goes with every denial.
func TestHeaderStyles(t *testing.T) {
	styles := []struct {
		style        string
		ietf, legacy bool
	}{
		{"IETF", true, false},
		{"Legacy", false, true},
		{"Both", true, true},
		{"None", false, false},
	}
	for _, m := range []mode{memoryMode, remoteMode} {
		for _, s := range styles {
			t.Run(m.name+"/"+s.style, func(t *testing.T) {
				l := m.new(t, []named{{"p", "key: global\nresponse: {headers: " + s.style + "}\nlimits: [{name: w, fixedWindow: {limit: 1, window: 1m}}]"}})
				h := l.Handler(&app{})
				for n, status := range []int{200, 429} {
					rec := send(h, "GET", "/", "", nil)
					if rec.Code != status {
						t.Fatalf("request %d: status %d, want %d", n+1, rec.Code, status)
					}
					hdr := rec.Header()
					_, hasIETF := hdr["RateLimit"]
					_, hasPolicy := hdr["RateLimit-Policy"]
					hasLegacy := exact(hdr, "X-RateLimit-Limit") != "" && exact(hdr, "X-RateLimit-Remaining") != "" && exact(hdr, "X-RateLimit-Reset") != ""
					anyLegacy := exact(hdr, "X-RateLimit-Limit") != "" || exact(hdr, "X-RateLimit-Remaining") != "" || exact(hdr, "X-RateLimit-Reset") != ""
					if hasIETF != s.ietf || hasPolicy != s.ietf {
						t.Errorf("request %d: RateLimit %v RateLimit-Policy %v, want %v", n+1, hasIETF, hasPolicy, s.ietf)
					}
					if hasLegacy != s.legacy || anyLegacy != s.legacy {
						t.Errorf("request %d: legacy headers %v, want %v", n+1, hdr, s.legacy)
					}
					if s.ietf && hdr["RateLimit-Policy"][0] != `"p/w";q=1;w=60` {
						t.Errorf("request %d: RateLimit-Policy %q", n+1, hdr["RateLimit-Policy"])
					}
					if ra := hdr.Get("Retry-After"); (ra != "") != (status == 429) {
						t.Errorf("request %d: Retry-After %q", n+1, ra)
					}
				}
			})
		}
	}
}

// TestClientIP: forwarded headers count only from trusted proxies; an
// untrusted peer is keyed by its own address whatever it claims.
func TestClientIP(t *testing.T) {
	const onePerClient = "key: '{client_ip}'\nlimits: [{name: once, fixedWindow: {limit: 1, window: 1h}}]"
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			h := m.new(t, []named{{"ip", onePerClient}}).Handler(&app{})
			type req struct {
				what, peer, xff string
				status          int
			}
			for _, r := range []req{
				{"client behind proxy 10.0.0.5", "10.0.0.5:1000", "203.0.113.9", 200},
				{"same client behind proxy 10.0.0.6", "10.0.0.6:1000", "203.0.113.9", 429},
				{"another client behind the proxy", "10.0.0.5:1000", "203.0.113.10", 200},
				{"client prepends a forged hop", "10.0.0.5:1000", "192.0.2.77, 203.0.113.10", 429},
				{"proxy chain: client, public hop, our proxies", "127.0.0.1:1000", "203.0.113.11, 10.1.2.3, 10.0.0.5", 200},
				{"untrusted peer claims an address", "198.51.100.20:1000", "203.0.113.50", 200},
				{"untrusted peer claims another address", "198.51.100.20:1000", "203.0.113.51", 429},
				{"untrusted peer without claims", "198.51.100.20:1000", "", 429},
				{"a forged address gets nobody's bucket", "198.51.100.21:1000", "203.0.113.9", 200},
			} {
				headers := map[string]string{}
				if r.xff != "" {
					headers["X-Forwarded-For"] = r.xff
				}
				if rec := send(h, "GET", "/", r.peer, headers); rec.Code != r.status {
					t.Errorf("%s: status %d, want %d", r.what, rec.Code, r.status)
				}
			}
			// X-Real-IP from a trusted proxy, when there is no X-Forwarded-For.
			if rec := send(h, "GET", "/", "10.0.0.5:1000", map[string]string{"X-Real-IP": "203.0.113.12"}); rec.Code != 200 {
				t.Errorf("X-Real-IP from a trusted proxy: status %d, want 200", rec.Code)
			}
			if rec := send(h, "GET", "/", "10.0.0.6:1000", map[string]string{"X-Real-IP": "203.0.113.12"}); rec.Code != 429 {
				t.Errorf("X-Real-IP from a trusted proxy, again: status %d, want 429", rec.Code)
			}
		})
	}
	t.Run("no trusted proxies", func(t *testing.T) {
		none, err := clientip.ParseTrustedProxies(nil)
		if err != nil {
			t.Fatal(err)
		}
		h := memoryMode.new(t, []named{{"ip", onePerClient}}, middleware.WithTrustedProxies(none)).Handler(&app{})
		a := send(h, "GET", "/", "10.0.0.5:1000", map[string]string{"X-Forwarded-For": "203.0.113.1"})
		b := send(h, "GET", "/", "10.0.0.5:1000", map[string]string{"X-Forwarded-For": "203.0.113.2"})
		if a.Code != 200 || b.Code != 429 {
			t.Errorf("statuses %d %d, want 200 429: the peer is the client", a.Code, b.Code)
		}
	})
}

// TestPathSpellingsShareTheLimit: the path is decoded and cleaned before
// matching, so another spelling of /login cannot skip its policy.
func TestPathSpellingsShareTheLimit(t *testing.T) {
	for _, m := range []mode{memoryMode, remoteMode} {
		t.Run(m.name, func(t *testing.T) {
			h := m.new(t, []named{{"login", "match: {paths: [/login]}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"}}).Handler(&app{})
			if rec := send(h, "POST", "/login", "", nil); rec.Code != 200 {
				t.Fatalf("first: %d", rec.Code)
			}
			for _, target := range []string{"/login", "//login", "/x/../login", "/%6Cogin", "/./login"} {
				if rec := send(h, "POST", target, "", nil); rec.Code != 429 {
					t.Errorf("%s: status %d, want 429", target, rec.Code)
				}
			}
		})
	}
}

// TestRemoteIgnoresForgedDescriptions: headers that describe a request to
// the check endpoint, sent by the client, do not reach it; the endpoint
// decides about the request the middleware actually serves.
func TestRemoteIgnoresForgedDescriptions(t *testing.T) {
	h := remoteMode.new(t, []named{{"api", "match: {paths: ['/api/*']}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"}}).Handler(&app{})
	forged := map[string]string{
		"X-Original-URL":     "http://shop.example.com/public",
		"X-Original-Method":  "GET",
		"X-Forwarded-Uri":    "/public",
		"X-Forwarded-Method": "OPTIONS",
		"X-Forwarded-Host":   "elsewhere.example.com",
		"Forwarded":          "for=192.0.2.1",
	}
	for n, want := range []int{200, 429, 429} {
		if rec := send(h, "POST", "http://shop.example.com/api/orders", "", forged); rec.Code != want {
			t.Errorf("request %d: status %d, want %d", n+1, rec.Code, want)
		}
	}
}

// TestRemoteForwardsHeaders: policies of the endpoint see the request's
// headers (all by default, only the listed ones with Headers).
func TestRemoteForwardsHeaders(t *testing.T) {
	policies := []named{{"per-user", "key: '{header:X-User}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"}}
	ep := newEndpoint(t, "shop", policies)
	all := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: ep.URL})).Handler(&app{})
	if a, b := send(all, "GET", "/", "", map[string]string{"X-User": "ann"}), send(all, "GET", "/", "", map[string]string{"X-User": "bob"}); a.Code != 200 || b.Code != 200 {
		t.Errorf("two users: %d %d, want 200 200", a.Code, b.Code)
	}
	if rec := send(all, "GET", "/", "", map[string]string{"X-User": "ann"}); rec.Code != 429 {
		t.Errorf("ann again: %d, want 429", rec.Code)
	}
	only := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: ep.URL, Headers: []string{"x-other"}})).Handler(&app{})
	rec := send(only, "GET", "/", "", map[string]string{"X-User": "cid"})
	if rec.Code != 429 || decodeProblem(t, rec).Type != "https://sluice.dev/problems/missing-key" {
		t.Errorf("X-User not forwarded: status %d body %s, want 429 missing-key", rec.Code, rec.Body)
	}
}

// TestDenyStatusAndMissingKey: the policy's denyStatus is the answer's
// status; onMissingKey Deny answers a missing-key problem.
func TestDenyStatusAndMissingKey(t *testing.T) {
	policies := []named{
		{"a-status", "match: {paths: [/busy]}\nkey: global\nresponse: {denyStatus: 503}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"},
		{"b-key", "match: {paths: [/keyed]}\nkey: '{header:X-API-Key}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"},
	}
	for _, m := range []mode{memoryMode, remoteMode} {
		t.Run(m.name, func(t *testing.T) {
			h := m.new(t, policies).Handler(&app{})
			send(h, "GET", "/busy", "", nil)
			rec := send(h, "GET", "/busy", "", nil)
			if rec.Code != 503 || decodeProblem(t, rec).Status != 503 || rec.Header().Get("Retry-After") == "" {
				t.Errorf("denyStatus: %d %v %s", rec.Code, rec.Header(), rec.Body)
			}
			rec = send(h, "GET", "/keyed", "", nil)
			if p := decodeProblem(t, rec); rec.Code != 429 || p.Type != "https://sluice.dev/problems/missing-key" || rec.Header().Get("Retry-After") != "" {
				t.Errorf("missing key: %d %+v, want 429 missing-key without Retry-After", rec.Code, p)
			}
			if rec := send(h, "GET", "/keyed", "", map[string]string{"X-API-Key": "k1"}); rec.Code != 200 {
				t.Errorf("with a key: %d", rec.Code)
			}
		})
	}
}

// TestDenyHandler: a custom answer gets the decision; the headers are
// already set; the app is not called.
func TestDenyHandler(t *testing.T) {
	for _, m := range []mode{memoryMode, remoteMode} {
		t.Run(m.name, func(t *testing.T) {
			var got middleware.Decision
			deny := middleware.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d middleware.Decision) {
				got = d
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(d.Status)
				_, _ = w.Write([]byte("slow down\n"))
			})
			a := &app{}
			h := m.new(t, []named{{"api", "key: global\nlimits: [{name: hour, fixedWindow: {limit: 1, window: 1h}}]"}}, deny).Handler(a)
			send(h, "GET", "/", "", nil)
			rec := send(h, "GET", "/", "", nil)
			if rec.Code != 429 || rec.Body.String() != "slow down\n" || rec.Header().Get("Content-Type") != "text/plain" {
				t.Errorf("answer %d %q %v", rec.Code, rec.Body, rec.Header())
			}
			if rec.Header().Get("Retry-After") == "" || rec.Header()["RateLimit"] == nil {
				t.Errorf("headers not set before the deny handler: %v", rec.Header())
			}
			if got.Reason != middleware.ReasonRateLimited || got.Status != 429 || !strings.HasSuffix(got.Policy, "/api") || got.Limit != "hour" ||
				got.RetryAfter <= 59*time.Minute || got.RetryAfter > time.Hour || got.Err != nil {
				t.Errorf("decision %+v", got)
			}
			if a.calls.Load() != 1 {
				t.Errorf("the app served %d requests, want 1", a.calls.Load())
			}
		})
	}
}

// TestDenyHandlerOfABan: a denial by the policy's penalty box reaches the
// deny handler as RateLimited with no limit named (the ban denies, not a
// limit) and the ban's wait, decided in-process or by the check endpoint
// alike; the denial before the ban names its limit.
func TestDenyHandlerOfABan(t *testing.T) {
	for _, m := range []mode{memoryMode, remoteMode} {
		t.Run(m.name, func(t *testing.T) {
			var got []middleware.Decision
			deny := middleware.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d middleware.Decision) {
				got = append(got, d)
				w.WriteHeader(d.Status)
			})
			spec := "key: global\nlimits: [{name: hour, fixedWindow: {limit: 1, window: 1h}}]\npenalty: {denials: 2, within: 1m, ban: 5h, maxBan: 10h}"
			h := m.new(t, []named{{"api", spec}}, deny).Handler(&app{})
			for range 3 {
				send(h, "GET", "/", "", nil)
			}
			if len(got) != 2 {
				t.Fatalf("%d denials reached the handler, want 2", len(got))
			}
			if d := got[0]; d.Reason != middleware.ReasonRateLimited || d.Limit != "hour" || d.RetryAfter > time.Hour {
				t.Errorf("the denial before the ban: %+v, want limit hour and a wait within the hour", d)
			}
			if d := got[1]; d.Reason != middleware.ReasonRateLimited || d.Limit != "" || d.RetryAfter <= 4*time.Hour || !strings.HasSuffix(d.Policy, "/api") {
				t.Errorf("the denial that bans: %+v, want no limit named and the ban's 5h wait", d)
			}
		})
	}
}

// TestConcurrentRequestsAdmitExactlyTheLimit: 200 concurrent requests
// against a limit of 50 reach the app exactly 50 times, Redis's first
// calls (which load the library) included.
func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	for _, m := range []mode{memoryMode, redisMode} {
		t.Run(m.name, func(t *testing.T) {
			a := &app{}
			// A deadline no call misses, even on a loaded machine: this is about
			// atomicity, and a timeout would let the failure mode admit.
			h := m.new(t, []named{{"p", "key: global\nlimits: [{name: l, tokenBucket: {capacity: 50, refillRate: 1, refillInterval: 1h}}]"}},
				middleware.WithStoreTimeout(10*time.Second)).Handler(a)
			var wg sync.WaitGroup
			var mu sync.Mutex
			codes := map[int]int{}
			for range 200 {
				wg.Go(func() {
					rec := send(h, "GET", "/", "", nil)
					mu.Lock()
					codes[rec.Code]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if a.calls.Load() != 50 || codes[200] != 50 || codes[429] != 150 {
				t.Errorf("app calls %d, statuses %v; want 50 allowed and 150 denied", a.calls.Load(), codes)
			}
		})
	}
}

// A request the policies cannot read (a host nothing can be read from, a
// method that is not upper case, a header section over the check
// endpoint's bound) is answered 400 or 431 naming what is wrong, before
// the handler, as the check endpoint answers a proxy that sends it: never
// passed on with the policies that would read it skipped. Remotely too,
// where the endpoint's 400 would otherwise be its failure, answered by the
// failure mode (Open: passed on) and opening the breaker for everyone.
func TestUnreadableRequestsAreRefused(t *testing.T) {
	policies := []named{
		{"host", "match: {hosts: [api.example.com]}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"},
		{"post", "match: {methods: [POST]}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"},
	}
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			a := &app{}
			h := m.new(t, policies).Handler(a)
			for _, c := range []struct {
				name, method, host string
				headers            map[string]string
				status             int
				names              string
			}{
				{"host [x", "GET", "[x", nil, 400, "header Host"},
				{"host [api.example.com", "GET", "[api.example.com", nil, 400, "header Host"},
				{"empty host", "GET", "", nil, 400, "header Host"},
				{"lower-case method", "post", "api.example.com", nil, 400, "method"},
				{"header section", "GET", "api.example.com", map[string]string{"X-Big": strings.Repeat("b", 65<<10)}, 431, "header section"},
			} {
				for range 6 { // more than the remote breaker's 5 failures
					r := httptest.NewRequest(c.method, "/login", nil)
					r.Host = c.host
					r.RemoteAddr = "203.0.113.9:4000"
					for k, v := range c.headers {
						r.Header.Set(k, v)
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					if p := decodeProblem(t, rec); rec.Code != c.status || !strings.HasPrefix(p.Detail, c.names) {
						t.Fatalf("%s: %d %+v, want %d naming %s", c.name, rec.Code, p, c.status, c.names)
					}
				}
			}
			if n := a.calls.Load(); n != 0 {
				t.Errorf("the handler served %d refused requests", n)
			}
			if rec := send(h, "GET", "http://api.example.com/login", "203.0.113.9:4000", nil); rec.Code != 200 {
				t.Errorf("a readable request after them: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// TestRemoteJoinsTheTrace: the check the middleware asks the endpoint for
// carries the request's trace context: the service's span when its
// context has one, else the client's traceparent, also when Headers
// forwards nothing else; without either, none.
func TestRemoteJoinsTheTrace(t *testing.T) {
	var got atomic.Value
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Traceparent"))
		w.WriteHeader(http.StatusOK)
	}))
	defer ep.Close()
	h := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: ep.URL, Headers: []string{"x-other"}})).Handler(&app{})

	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	service := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 1}, SpanID: trace.SpanID{0xb7, 0xad, 1}, TraceFlags: trace.FlagsSampled,
	})
	for _, tc := range []struct {
		name   string
		span   trace.SpanContext
		header string
		want   string
	}{
		{"the service's span", service, client, "00-" + service.TraceID().String() + "-" + service.SpanID().String() + "-01"},
		{"the client's traceparent", trace.SpanContext{}, client, client},
		{"no trace", trace.SpanContext{}, "", ""},
	} {
		r := httptest.NewRequest("GET", "http://shop.example.com/", nil)
		if tc.header != "" {
			r.Header.Set("Traceparent", tc.header)
		}
		if tc.span.IsValid() {
			r = r.WithContext(trace.ContextWithSpanContext(r.Context(), tc.span))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK || got.Load() != tc.want {
			t.Errorf("%s: status %d, the check's traceparent %q, want %q", tc.name, rec.Code, got.Load(), tc.want)
		}
	}
}
