package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

const perTenant = `
match: {paths: ["/api/*"]}
key: "{header:X-Tenant}"
limits:
- name: per-minute
  fixedWindow: {limit: 3, window: 1m}
- name: per-day
  fixedWindow: {limit: 100, window: 24h}
penalty: {denials: 2, within: 1m, ban: 5m, maxBan: 1h}
`

const adminOnly = `
match: {paths: ["/admin/*"], methods: [POST], headers: [{name: X-Admin}]}
key: "{client_ip}"
limits:
- name: per-minute
  fixedWindow: {limit: 3, window: 1m}
`

// fixture is a handler over a checker with the two policies of namespace
// shop, on one store.
type fixture struct {
	t       *testing.T
	checker *check.Checker
	server  *httptest.Server
}

// stores runs f over the memory store and the Redis store.
func stores(t *testing.T, f func(t *testing.T, store ratelimit.Backend)) {
	t.Run("memory", func(t *testing.T) { f(t, storetest.Memory(t, nil).Backend()) })
	t.Run("redis", func(t *testing.T) {
		s := storetest.Redis(t, redistest.Start(t).Addr())
		if err := s.Load(context.Background()); err != nil { // ahead of the checks' timeouts
			t.Fatal(err)
		}
		f(t, s.Backend())
	})
}

func newFixture(t *testing.T, store ratelimit.Backend) *fixture {
	t.Helper()
	c := checktest.New(t, check.Options{Backend: store, DenyCacheSize: -1},
		policytest.Compile(t, "shop", "per-tenant", perTenant), policytest.Compile(t, "shop", "admin-only", adminOnly))
	h := New(Options{Checker: c})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), "tester")))
	}))
	t.Cleanup(srv.Close)
	return &fixture{t: t, checker: c, server: srv}
}

// call makes a request under Base and decodes the answer into out (nil:
// none); it returns the status code and, on an error, the Status.
func (f *fixture) call(method, path, body string, out any) (int, map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.server.URL+Base+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var st map[string]any
		if err := json.Unmarshal(data, &st); err != nil || st["kind"] != "Status" || st["status"] != "Failure" {
			f.t.Fatalf("%s %s: %d %s is not a Status", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, st
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			f.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return resp.StatusCode, nil
}

// consume checks n requests of tenant through the checker, as the check
// endpoint would.
func (f *fixture) consume(tenant string, n int) {
	f.t.Helper()
	for range n {
		req := &policy.Request{Method: "GET", Host: "shop.example.com", Path: "/api/cart", Header: http.Header{"X-Tenant": {tenant}}}
		if _, err := f.checker.Check(context.Background(), check.Input{Namespace: "shop", Request: req}); err != nil {
			f.t.Fatal(err)
		}
	}
}

const keys = "/namespaces/shop/ratelimitpolicies/per-tenant/keys"

func (f *fixture) inspect(key string) adminapi.KeyState {
	f.t.Helper()
	var ks adminapi.KeyState
	if code, st := f.call("GET", keys+"?key="+key, "", &ks); code != http.StatusOK {
		f.t.Fatalf("inspect %s: %d %v", key, code, st)
	}
	return ks
}

func remaining(ks adminapi.KeyState) map[string]int64 {
	m := map[string]int64{}
	for _, l := range ks.Limits {
		m[l.Name] = l.Remaining
	}
	return m
}

func TestInspectResetBansLift(t *testing.T) {
	stores(t, func(t *testing.T, store ratelimit.Backend) {
		f := newFixture(t, store)
		f.consume("acme", 2)
		ks := f.inspect("acme")
		if got := remaining(ks); got["per-minute"] != 1 || got["per-day"] != 98 || ks.Ban != nil {
			t.Fatalf("inspect after 2: %+v", ks)
		}
		if again := f.inspect("acme"); remaining(again)["per-minute"] != 1 {
			t.Fatalf("inspect counted: %+v", again)
		}

		var reset adminapi.ResetAnswer
		if code, st := f.call("DELETE", keys+"?key=acme&limit=per-minute", "", &reset); code != 200 || len(reset.Limits) != 1 || reset.Limits[0] != "per-minute" {
			t.Fatalf("reset: %d %v %+v", code, st, reset)
		}
		if got := remaining(f.inspect("acme")); got["per-minute"] != 3 || got["per-day"] != 98 {
			t.Fatalf("after reset of per-minute: %v", got)
		}

		f.consume("acme", 6) // 3 admitted, then denied twice: banned
		var bans adminapi.BanList
		for deadline := time.Now().Add(5 * time.Second); len(bans.Bans) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			f.call("GET", "/namespaces/shop/ratelimitpolicies/per-tenant/bans", "", &bans) // recorded off the check's path
		}
		if len(bans.Bans) != 1 || bans.Bans[0].Key != "acme" || bans.Bans[0].Length != "5m0s" {
			t.Fatalf("bans: %+v", bans)
		}
		ks = f.inspect("acme")
		if ks.Ban == nil || ks.Ban.Length != "5m0s" {
			t.Fatalf("no ban after the denials: %+v", ks)
		}
		// Explain names the ban, not a limit, as what denies.
		ex := adminapi.Explanation{}
		f.call("POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/api/cart", "headers": {"X-Tenant": ["acme"]}}`, &ex)
		if d := ex.Decision; d.Allowed || d.Reason != "Banned" || d.Policy != "per-tenant" || d.Limit != "" || d.RetryAfter != "5m0s" {
			t.Fatalf("explain of a banned key: %+v", d)
		}
		// A reset keeps the ban.
		f.call("DELETE", keys+"?key=acme", "", &reset)
		if ks = f.inspect("acme"); ks.Ban == nil {
			t.Fatalf("a reset lifted the ban: %+v", ks)
		}
		if code, st := f.call("DELETE", "/namespaces/shop/ratelimitpolicies/per-tenant/bans?key=acme", "", nil); code != 200 {
			t.Fatalf("lift: %d %v", code, st)
		}
		if ks = f.inspect("acme"); ks.Ban != nil || remaining(ks)["per-minute"] != 3 {
			t.Fatalf("after lift: %+v", ks)
		}
		f.call("GET", "/namespaces/shop/ratelimitpolicies/per-tenant/bans", "", &bans)
		if len(bans.Bans) != 0 {
			t.Fatalf("bans after lift: %+v", bans)
		}
	})
}

func TestExplain(t *testing.T) {
	stores(t, func(t *testing.T, store ratelimit.Backend) {
		f := newFixture(t, store)
		f.consume("acme", 1)
		var ex adminapi.Explanation
		code, st := f.call("POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/api/cart?x=1", "clientIP": "203.0.113.7", "headers": {"X-Tenant": ["acme"]}}`, &ex)
		if code != 200 {
			t.Fatalf("explain: %d %v", code, st)
		}
		if len(ex.Policies) != 2 || ex.Policies[0].Name != "admin-only" || ex.Policies[0].Matched || ex.Policies[0].Reason != "path /api/cart matches none of spec.match.paths" {
			t.Fatalf("admin-only: %+v", ex.Policies)
		}
		pt := ex.Policies[1]
		if !pt.Matched || pt.Key == nil || *pt.Key != "acme" || len(pt.Limits) != 2 || pt.Limits[0].Remaining != 1 {
			t.Fatalf("per-tenant: %+v", pt)
		}
		if !ex.Decision.Allowed || ex.Decision.Policy != "per-tenant" || ex.Decision.Limit != "per-minute" {
			t.Fatalf("decision: %+v", ex.Decision)
		}
		if got := remaining(f.inspect("acme")); got["per-minute"] != 2 {
			t.Fatalf("explain counted: %v", got)
		}

		// A missing key, and the reasons of each part of a match.
		ex = adminapi.Explanation{}
		f.call("POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/api/cart"}`, &ex)
		if pt := ex.Policies[1]; !pt.Matched || pt.MissingKey == nil || !*pt.MissingKey || pt.OnMissing != "Skip" {
			t.Fatalf("missing key: %+v", pt)
		}
		for body, reason := range map[string]string{
			`{"url": "https://shop.example.com/admin/x"}`:                                                  "method GET matches none of spec.match.methods",
			`{"url": "https://shop.example.com/admin/x", "method": "POST"}`:                                "header X-Admin is absent (spec.match.headers[0])",
			`{"url": "https://shop.example.com/admin/x", "method": "POST", "headers": {"X-Admin": ["1"]}}`: "",
		} {
			var ex adminapi.Explanation
			f.call("POST", "/namespaces/shop/explain", body, &ex)
			if got := ex.Policies[0]; got.Reason != reason || got.Matched != (reason == "") {
				t.Errorf("%s: %+v, want reason %q", body, got, reason)
			}
		}
	})
}

// TestBadInput sends each bad input of every route: the answer is a
// Status naming the argument, and nothing changed.
func TestBadInput(t *testing.T) {
	stores(t, func(t *testing.T, store ratelimit.Backend) {
		f := newFixture(t, store)
		f.consume("acme", 2)
		before := f.inspect("acme")
		for _, c := range []struct {
			method, path, body string
			code               int
			message            string
		}{
			{"GET", "/namespaces/shop/ratelimitpolicies/nope/keys?key=acme", "", 404, `policy "shop/nope" not found (policies in shop: admin-only, per-tenant)`},
			{"GET", "/namespaces/other/ratelimitpolicies/per-tenant/keys?key=acme", "", 404, `namespace "other" has no policies`},
			{"GET", "/namespaces/sh%1Bop/ratelimitpolicies/p%E2%80%AE/keys?key=acme", "", 404, `policy "sh\x1bop/p\u202e" not found: namespace "sh\x1bop" has no policies`},
			{"GET", keys, "", 400, `query parameter "key" is required`},
			{"GET", keys + "?key=", "", 400, `query parameter "key" is required`},
			{"GET", keys + "?key=a&key=b", "", 400, `query parameter "key" is given 2 times`},
			{"DELETE", keys + "?key=acme&limit=per-hour", "", 404, `limit "per-hour" is not a limit of policy shop/per-tenant (its limits: per-minute, per-day)`},
			{"DELETE", keys + "?key=acme&limit=", "", 400, `query parameter "limit" is empty`},
			{"DELETE", keys + "?key=nobody", "", 404, `key "nobody" of policy shop/per-tenant has no state`},
			{"DELETE", keys, "", 400, `query parameter "key" is required`},
			{"DELETE", "/namespaces/shop/ratelimitpolicies/per-tenant/bans?key=acme", "", 404, "has no ban in force"},
			{"DELETE", "/namespaces/shop/ratelimitpolicies/nope/bans?key=acme", "", 404, `policy "shop/nope" not found`},
			{"GET", "/namespaces/shop/ratelimitpolicies/nope/bans", "", 404, `policy "shop/nope" not found`},
			{"PUT", keys + "?key=acme", "", 405, "allowed: GET, DELETE"},
			{"GET", "/namespaces/shop/explain", "", 405, "allowed: POST"},
			{"GET", "/namespaces/shop/ratelimitpolicies/per-tenant/nothing", "", 404, "no such path"},
			{"GET", "/namespaces/shop/ratelimitpolicies/per-tenant/no%1B%5B2Jthing", "", 404, `no such path: "/apis/admin.ratelimit.sluice.dev/v1alpha1/namespaces/shop/ratelimitpolicies/per-tenant/no\x1b[2Jthing"`},
			{"POST", "/namespaces/shop/explain", `{"url": 1}`, 400, "body: not an explain request"},
			{"POST", "/namespaces/shop/explain", `{"url": "x", "extra": 1}`, 400, `unknown field "extra"`},
			{"POST", "/namespaces/shop/explain", `{}`, 400, `body field "url" is required`},
			{"POST", "/namespaces/shop/explain", `{"url": "/api/cart"}`, 400, `body field "url" "/api/cart" is not an absolute URL`},
			{"POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/", "method": "G T"}`, 400, `body field "method"`},
			{"POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/", "clientIP": "nope"}`, 400, `body field "clientIP"`},
			{"POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/", "headers": {"a b": ["1"]}}`, 400, `body field "headers"`},
			{"POST", "/namespaces/other/explain", `{"url": "https://shop.example.com/"}`, 404, `namespace "other" has no policies`},
			{"POST", "/namespaces/a%0Ab/explain", `{"url": "https://shop.example.com/"}`, 404, `namespace "a\nb" has no policies`},
		} {
			code, st := f.call(c.method, c.path, c.body, nil)
			msg, _ := st["message"].(string)
			if code != c.code || !strings.Contains(msg, c.message) || st["code"] != float64(c.code) {
				t.Errorf("%s %s %s: %d %q, want %d with %q", c.method, c.path, c.body, code, msg, c.code, c.message)
			}
		}
		if after := f.inspect("acme"); remaining(after)["per-minute"] != remaining(before)["per-minute"] || remaining(after)["per-day"] != remaining(before)["per-day"] {
			t.Fatalf("bad input changed the state: %+v, was %+v", after, before)
		}
	})
}

func TestDiscovery(t *testing.T) {
	f := newFixture(t, storetest.Memory(t, nil).Backend())
	var list struct {
		Kind         string `json:"kind"`
		GroupVersion string `json:"groupVersion"`
		Resources    []struct {
			Name  string   `json:"name"`
			Verbs []string `json:"verbs"`
		} `json:"resources"`
	}
	if code, _ := f.call("GET", "", "", &list); code != 200 || list.Kind != "APIResourceList" || list.GroupVersion != Group+"/"+Version || len(list.Resources) != 3 {
		t.Fatalf("discovery: %d %+v", code, list)
	}
}

func TestCheckLocalListen(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8081": "",
		"[::1]:8081":     "",
		"localhost:8081": "",
		":8081":          "must be a loopback address",
		"0.0.0.0:8081":   "must be a loopback address",
		"10.0.0.1:8081":  "must be a loopback address",
		"127.0.0.1:8080": "is the check endpoint's",
		"nonsense":       "missing port",
	} {
		err := CheckLocalListen(addr, "127.0.0.1:8080", "")
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", addr, err, want)
		}
	}
}

// The top answer: a policy's most denied and admitted key values, the
// window in minutes, and the error bound in words.
func TestTop(t *testing.T) {
	c := checktest.New(t, check.Options{}, policytest.Compile(t, "shop", "per-tenant", perTenant))
	rec := topkeys.NewRecorder(nil)
	rec.Record("shop", "per-tenant", "acme", true, time.Now())
	h := New(Options{Checker: c, Top: rec})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Base+"/namespaces/shop/ratelimitpolicies/per-tenant/top", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("top: %d %s", w.Code, w.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	bound, _ := got["errorBound"].(string)
	delete(got, "errorBound")
	want := `{"admitted":[],"denied":[{"count":1,"key":"acme","overestimate":0}],"namespace":"shop","policy":"per-tenant","window":"5m"}`
	if norm, _ := json.Marshal(got); string(norm) != want {
		t.Errorf("answer %s, want %s and errorBound", w.Body, want)
	}
	if !strings.HasPrefix(bound, "each count exceeds") {
		t.Errorf("error bound %q", bound)
	}
}
