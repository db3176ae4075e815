package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
	"github.com/sluice-dev/sluice/webhook"
)

// inFlight is an HTTP policy with a concurrency limit of 1 and a short
// ban, on a long lease timeout.
const inFlight = `
match: {paths: ["/api/*"]}
key: "{header:X-Tenant}"
limits:
- name: in-flight
  concurrency: {limit: 1, leaseTimeout: 1h}
penalty: {denials: 1, within: 1m, ban: 1m, maxBan: 1h}
`

func inFlightFixture(t *testing.T, store ratelimit.Backend) *fixture {
	t.Helper()
	c := checktest.New(t, check.Options{Backend: store}, policytest.Compile(t, "shop", "in-flight", inFlight))
	h := New(Options{Checker: c})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{t: t, checker: c, server: srv}
}

// hold checks a request of tenant held by holder, as the middleware would.
func (f *fixture) hold(tenant, holder string) *check.Outcome {
	f.t.Helper()
	req := &policy.Request{Method: "GET", Host: "shop.example.com", Path: "/api/cart", Header: http.Header{"X-Tenant": {tenant}}}
	out, err := f.checker.Check(context.Background(), check.Input{Namespace: "shop", Request: req, Holder: holder})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestExplainTransport: explain answers as the transport named would: the
// HTTP auth hooks (the default) and ext_authz over gRPC refuse a
// concurrency limit, which they cannot release, with the no-release
// problem; /v1/check and the middleware, which release, decide it.
func TestExplainTransport(t *testing.T) {
	stores(t, func(t *testing.T, store ratelimit.Backend) {
		f := inFlightFixture(t, store)
		body := func(transport string) string {
			b := `{"url": "https://shop.example.com/api/cart", "headers": {"X-Tenant": ["acme"]}`
			if transport != "" {
				b += `, "transport": "` + transport + `"`
			}
			return b + "}"
		}
		for _, transport := range []string{"", "http", "ext-authz-grpc"} {
			var ex adminapi.Explanation
			if code, st := f.call("POST", "/namespaces/shop/explain", body(transport), &ex); code != 200 {
				t.Fatalf("%q: %d %v", transport, code, st)
			}
			d := ex.Decision
			if d.Allowed || d.Reason != "NoRelease" || !strings.Contains(d.Detail, "policy shop/in-flight, limit in-flight") {
				t.Fatalf("transport %q: decision %+v; want refused, NoRelease naming shop/in-flight's limit in-flight", transport, d)
			}
			// The limit's figures as a transport that releases would see them.
			if p := ex.Policies[0]; !p.Matched || len(p.Limits) != 1 || !p.Limits[0].Allowed || p.Limits[0].Remaining != 0 {
				t.Fatalf("transport %q: policy %+v; want its limit's figures", transport, p)
			}
		}
		for _, transport := range []string{"v1-check", "middleware"} {
			var ex adminapi.Explanation
			f.call("POST", "/namespaces/shop/explain", body(transport), &ex)
			if d := ex.Decision; !d.Allowed || d.Reason != "Allowed" || d.Detail != "" {
				t.Fatalf("transport %q: decision %+v; want allowed", transport, d)
			}
		}
		for _, transport := range []string{"rls", "nginx", "HTTP"} {
			code, st := f.call("POST", "/namespaces/shop/explain", body(transport), nil)
			if msg, _ := st["message"].(string); code != 400 || !strings.Contains(msg, `body field "transport"`) {
				t.Fatalf("transport %q: %d %q; want 400 naming the field", transport, code, msg)
			}
		}
		if out := f.hold("acme", "a"); !out.Allowed {
			t.Fatal("explain held units")
		}
	})
}

// TestExplainAgreesWithTheCheckEndpoint: what explain says a transport
// answers is what the check endpoint answers: the ForwardAuth hook
// refuses with the no-release problem and explain's detail, and
// POST /v1/check, which releases, decides.
func TestExplainAgreesWithTheCheckEndpoint(t *testing.T) {
	f := inFlightFixture(t, storetest.Memory(t, nil).Backend())
	endpoint, err := webhook.New(webhook.Options{Checker: f.checker})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(endpoint)
	t.Cleanup(srv.Close)
	explained := func(transport string) adminapi.Decision {
		var ex adminapi.Explanation
		f.call("POST", "/namespaces/shop/explain", `{"url": "https://shop.example.com/api/cart", "headers": {"X-Tenant": ["acme"]}, "transport": "`+transport+`"}`, &ex)
		return ex.Decision
	}

	req, _ := http.NewRequest("GET", srv.URL+"/check/shop", nil)
	req.Header = http.Header{"X-Forwarded-Method": {"GET"}, "X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"shop.example.com"},
		"X-Forwarded-Uri": {"/api/cart"}, "X-Tenant": {"acme"}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var problem checkhttp.Problem
	_ = json.NewDecoder(resp.Body).Decode(&problem)
	resp.Body.Close()
	if d := explained("http"); resp.StatusCode != http.StatusInternalServerError || problem.Type != checkhttp.ProblemNoRelease || d.Allowed || d.Detail != problem.Detail {
		t.Fatalf("ForwardAuth answered %d %+v; explain said %+v", resp.StatusCode, problem, d)
	}

	resp, err = http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(
		`{"namespace": "shop", "request": {"method": "GET", "host": "shop.example.com", "path": "/api/cart", "headers": {"X-Tenant": "acme"}}, "dryRun": true}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer webhook.CheckResponse
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if d := explained("v1-check"); !answer.Allowed || d.Allowed != answer.Allowed || d.Reason != answer.Reason {
		t.Fatalf("/v1/check answered %d %+v; explain said %+v", resp.StatusCode, answer, d)
	}
}
