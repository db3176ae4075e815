package grpcserver

import (
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// An override's number is what RLS reports: current_limit and the
// rate-limit headers carry it, for the overridden key only.
func TestRLSReportsTheOverride(t *testing.T) {
	x := overrides.NewIndex(nil)
	x.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "per-client"}, map[string]overrides.Entry{
		"10.0.0.1": {Key: "10.0.0.1", Limits: map[string]int64{"minute": 30}, Source: policy.OverrideRuntime}})
	e := startWith(t, check.Options{Backend: memstore.New().Backend(), Overrides: x}, Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "per-client", "match: {domain: edge, descriptor: [{key: remote_address}]}\nkey: '{descriptor:remote_address}'\nlimits: [{name: minute, fixedWindow: {limit: 3, window: 1m}}]"))
	send := func(addr string) *ratelimitv3.RateLimitResponse {
		return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("remote_address", addr)}})
	}
	for addr, want := range map[string]uint32{"10.0.0.1": 30, "10.0.0.2": 3} {
		st := send(addr).GetStatuses()[0]
		if st.GetCurrentLimit().GetRequestsPerUnit() != want || st.GetLimitRemaining() != want-1 {
			t.Errorf("%s: current_limit %v, remaining %d; want %d per minute", addr, st.GetCurrentLimit(), st.GetLimitRemaining(), want)
		}
	}
	for range 29 {
		send("10.0.0.1")
	}
	h := headersOf(send("10.0.0.1"))
	if h["RateLimit-Policy"] != `"per-client/minute";q=30;w=60` || h["X-RateLimit-Limit"] != "30" {
		t.Errorf("denial headers %v, want the override's q=30", h)
	}
}
