package grpcserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// fiveLimits is a descriptor policy of five limits, a bucket per address.
const fiveLimits = `match: {domain: edge, descriptor: [{key: remote_address}]}
key: '{descriptor:remote_address}'
limits:
- {name: a, fixedWindow: {limit: 2, window: 1m}}
- {name: b, fixedWindow: {limit: 10, window: 1m}}
- {name: c, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1m}}
- {name: d, gcra: {rate: 10, period: 1m, burst: 10}}
- {name: e, slidingWindowCounter: {limit: 10, window: 1m}}
`

// descriptors are n remote_address descriptors, of distinct addresses.
func descriptors(n int) []*ratelimitcommonv3.RateLimitDescriptor {
	ds := make([]*ratelimitcommonv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = rlsDescriptor("remote_address", fmt.Sprintf("10.0.%d.%d", i/250, i%250))
	}
	return ds
}

// TestRLSManyDescriptors: 64 descriptors (the most a request may carry)
// of a five-limit policy, 320 limits, more than one store call takes, are
// decided: OK twice, then OVER_LIMIT for each, on the memory store and on
// a real redis-server.
func TestRLSManyDescriptors(t *testing.T) {
	rs := storetest.Redis(t, redistest.Start(t).Addr())
	if err := rs.EnsureLoaded(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]ratelimit.Backend{"memory": storetest.Memory(t, nil).Backend(), "redis": rs.Backend()} {
		t.Run(name, func(t *testing.T) {
			e := start(t, store, Options{Domains: DomainBindings{"edge": "ns"}}, nil, compile(t, "ns", "five", fiveLimits))
			req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: descriptors(MaxDescriptors)}
			for i, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
				resp, err := ratelimitv3.NewRateLimitServiceClient(e.conn).ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("request %d of %d descriptors × 5 limits: %v", i, MaxDescriptors, err)
				}
				for d, code := range codesOf(resp) {
					if code != want {
						t.Fatalf("request %d: code %d of %d is %v, want %v", i, d, len(resp.GetStatuses())+1, code, want)
					}
				}
			}
		})
	}
}

// TestMoreLimitsThanOneCheck: a request that meets more limits than one
// check evaluates (ratelimit.MaxEntries) is refused, never answered
// INTERNAL (which Envoy's default failure_mode_deny: false allows): RLS
// says INVALID_ARGUMENT, ext_authz denies with 400 and a problem naming
// the bound; both with a message naming it.
func TestMoreLimitsThanOneCheck(t *testing.T) {
	// 26 five-limit policies matching each of 64 descriptors: 8,320 limits.
	var ps []*policy.Policy
	for i := range ratelimit.MaxEntries/(5*MaxDescriptors) + 1 {
		ps = append(ps, compile(t, "ns", fmt.Sprint("five-", i), fiveLimits))
	}
	// 1,025 HTTP policies of 8 limits without a match: 8,200 limits.
	var limits strings.Builder
	for l := range 8 {
		fmt.Fprintf(&limits, "- {name: l%d, fixedWindow: {limit: 5, window: 1m}}\n", l)
	}
	for i := range ratelimit.MaxEntries/8 + 1 {
		ps = append(ps, compile(t, "shop", fmt.Sprint("p-", i), "key: '{client_ip}'\nlimits:\n"+limits.String()))
	}
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil, ps...)
	bound := fmt.Sprint(ratelimit.MaxEntries)

	_, err := ratelimitv3.NewRateLimitServiceClient(e.conn).ShouldRateLimit(context.Background(),
		&ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: descriptors(MaxDescriptors)})
	if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), bound) {
		t.Fatalf("RLS: %v; want INVALID_ARGUMENT naming the bound %s", err, bound)
	}
	// Fewer descriptors fit.
	if resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: descriptors(8)}); resp.GetOverallCode() != rlsOK {
		t.Fatalf("8 descriptors: %v", codesOf(resp))
	}

	a := e.check(t, req{host: "shop.example.com", path: "/", source: "203.0.113.5", extensions: shop})
	if a.code != codes.InvalidArgument || a.httpStatus != http.StatusBadRequest || a.contentType != checkhttp.ProblemContentType {
		t.Fatalf("ext_authz: %v %d %s; want INVALID_ARGUMENT, 400 problem+json", a.code, a.httpStatus, a.contentType)
	}
	if p := problem(t, a.body); p["type"] != checkhttp.ProblemTooManyLimits || !strings.Contains(fmt.Sprint(p["detail"]), bound) {
		t.Fatalf("ext_authz problem %v", p)
	}
}
