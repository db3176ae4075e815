package grpcserver

import (
	"context"
	"slices"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// TestAuthzSoftLimitTellsTheUpstream: ext_authz over gRPC hands the
// upstream X-Sluice-Over-Limit (not the client) when a request goes on
// over a soft limit, and otherwise removes one the client sent.
func TestAuthzSoftLimitTellsTheUpstream(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{}, nil, compile(t, "shop", "api", `key: global
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
- {name: quota, fixedWindow: {limit: 4, window: 1h}}`))
	r := req{host: "shop.example.com", path: "/", extensions: map[string]string{"namespace": "shop"},
		headers: map[string]string{"x-sluice-over-limit": "forged"}}
	for n, want := range []string{"", "shop/api;limit=burst;mode=Soft", "shop/api;limit=burst;mode=Soft"} {
		resp, err := e.authz.Check(context.Background(), r.proto())
		if err != nil {
			t.Fatal(err)
		}
		ok := resp.GetOkResponse()
		if ok == nil {
			t.Fatalf("request %d: denied %v", n+1, resp)
		}
		var upstream string
		for _, h := range ok.GetHeaders() {
			if h.GetHeader().GetKey() == checkhttp.OverLimitHeader {
				upstream = h.GetHeader().GetValue()
			}
		}
		for _, h := range ok.GetResponseHeadersToAdd() {
			if h.GetHeader().GetKey() == checkhttp.OverLimitHeader {
				t.Fatalf("request %d: the client is handed %s", n+1, checkhttp.OverLimitHeader)
			}
		}
		removed := slices.Contains(ok.GetHeadersToRemove(), "x-sluice-over-limit")
		if upstream != want || removed != (want == "") {
			t.Fatalf("request %d: upstream %q, removed %v; want %q, removed when none", n+1, upstream, removed, want)
		}
	}
	if a := e.check(t, r); a.httpStatus != 200 || a.client["X-RateLimit-Remaining"] != "0" {
		t.Fatalf("fourth request, under quota: %d, the client's headers %v; want 200, the soft limit at 0", a.httpStatus, a.client)
	}
	if a := e.check(t, r); a.httpStatus != 429 {
		t.Fatalf("fifth request, over quota: %d; want 429", a.httpStatus)
	}
}

// TestRLSSoftLimitTellsTheUpstream: the rate limit service hands the
// upstream X-Sluice-Over-Limit in request_headers_to_add, the descriptor
// stays OK, and the client's headers show the soft limit at 0.
func TestRLSSoftLimitTellsTheUpstream(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "tenant", "match: {domain: edge}\nlimits: [{name: soft, mode: Soft, fixedWindow: {limit: 1, window: 1h}}]"))
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}}
	if resp := e.shouldRateLimit(t, req); len(resp.GetRequestHeadersToAdd()) != 0 {
		t.Fatalf("under: request_headers_to_add %v", resp.GetRequestHeadersToAdd())
	}
	resp := e.shouldRateLimit(t, req)
	add := resp.GetRequestHeadersToAdd()
	if got := codesOf(resp); got[0] != rlsOK || got[1] != rlsOK || len(add) != 1 || add[0].GetKey() != checkhttp.OverLimitHeader || add[0].GetValue() != "ns/tenant;limit=soft;mode=Soft" {
		t.Fatalf("over: codes %v, request_headers_to_add %v", got, add)
	}
	if h := headersOf(resp); h["X-RateLimit-Remaining"] != "0" || h["Retry-After"] != "" {
		t.Fatalf("over: the client's headers %v", h)
	}
}

// TestRLSHiddenLimitNotInStatuses: a hidden limit's figures never reach a
// descriptor's status (Envoy builds its x-ratelimit headers from them):
// the status shows the part's tightest visible limit, and a denial by the
// hidden limit is OVER_LIMIT with the visible limit's figures.
func TestRLSHiddenLimitNotInStatuses(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "tenant", `match: {domain: edge}
limits:
- {name: flood, visibility: Hidden, fixedWindow: {limit: 1, window: 1m}}
- {name: plan, fixedWindow: {limit: 100, window: 1h}}`))
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}}
	for n, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, ratelimitv3.RateLimitResponse_OVER_LIMIT} {
		resp := e.shouldRateLimit(t, req)
		st := resp.GetStatuses()[0]
		if st.GetCode() != want || st.GetCurrentLimit().GetName() != "tenant/plan" || st.GetLimitRemaining() != 99 {
			t.Fatalf("request %d: code %v, current limit %v, remaining %d; want %v, tenant/plan with 99 left (flood hidden)",
				n+1, st.GetCode(), st.GetCurrentLimit(), st.GetLimitRemaining(), want)
		}
	}
}

// TestRLSShadowLimitNotInStatuses: a shadow limit's figures never reach a
// descriptor's status, as they never reach the HTTP answer's headers
// (Outcome.Shown): with a hidden enforced limit and a shadow one, the
// part shows no limit at all, allowed and denied alike.
func TestRLSShadowLimitNotInStatuses(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "hs", `match: {domain: edge}
limits:
- {name: cap, visibility: Hidden, fixedWindow: {limit: 2, window: 1m}}
- {name: trial, mode: Shadow, fixedWindow: {limit: 1, window: 1m}}`))
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}}
	for n, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, rlsOK, ratelimitv3.RateLimitResponse_OVER_LIMIT} {
		resp := e.shouldRateLimit(t, req)
		st := resp.GetStatuses()[0]
		if st.GetCode() != want || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 {
			t.Fatalf("request %d: code %v, current limit %v, remaining %d; want %v and no limit shown (cap hidden, trial shadow)",
				n+1, st.GetCode(), st.GetCurrentLimit(), st.GetLimitRemaining(), want)
		}
		if h := headersOf(resp); h["X-RateLimit-Limit"] != "" || h["X-RateLimit-Remaining"] != "" {
			t.Fatalf("request %d: the client's headers %v show a limit", n+1, h)
		}
	}
}

// TestRLSSoftLimitOverShowsNoneLeft: a soft limit the request went on
// over shows remaining 0 in the descriptor's status, as in the HTTP
// answer's headers (checkhttp), though its count still holds some: a hit
// of 3 with 2 left goes on over a soft limit of 5 uncharged.
func TestRLSSoftLimitOverShowsNoneLeft(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "tenant", `match: {domain: edge}
limits:
- {name: soft, mode: Soft, fixedWindow: {limit: 5, window: 1h}}
- {name: quota, fixedWindow: {limit: 100, window: 1h}}`))
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}, HitsAddend: 3}
	for n := range 3 {
		resp := e.shouldRateLimit(t, req)
		st := resp.GetStatuses()[0]
		if n == 0 {
			continue
		}
		if st.GetCode() != rlsOK || st.GetCurrentLimit().GetName() != "tenant/soft" || st.GetLimitRemaining() != 0 {
			t.Fatalf("request %d, over the soft limit: code %v, current limit %v, remaining %d; want OK, the soft limit with 0 left",
				n+1, st.GetCode(), st.GetCurrentLimit(), st.GetLimitRemaining())
		}
		if h := headersOf(resp); h["X-RateLimit-Remaining"] != "0" {
			t.Fatalf("request %d: the client's headers %v", n+1, h)
		}
	}
}
