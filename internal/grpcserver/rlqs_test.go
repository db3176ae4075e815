package grpcserver

import (
	"context"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// The endpoint serves the rate limit quota service beside RLS, for the
// domains --rls-domain binds, and one policy's bucket is the same for
// both: what the quota service reserves, RLS no longer admits.
func TestQuotaServiceBesideRLS(t *testing.T) {
	store := storetest.Redis(t, redistest.Start(t).Addr())
	e := start(t, store.Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "tenant", "match: {domain: edge, descriptor: [{key: tenant}, {key: plan}]}\nlimits: [{name: h, fixedWindow: {limit: 10, window: 1h}}]"))
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.CloseSend() }()
	// The bucket id's entries in another order than the policy names them.
	id := map[string]string{"plan": "free", "tenant": "acme"}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: 1}, // none denied: no top-up follows
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		t.Fatalf("assignment: %v, want a token bucket", resp)
	}
	// 1 admitted before the assignment and what the token bucket may
	// admit in a reporting interval (5 s until reports tell another) are
	// taken from the 10 of the hour; RLS has the rest.
	taken := 1 + int(tb.GetMaxTokens()+5*tb.GetTokensPerFill().GetValue())
	rls := ratelimitv3.NewRateLimitServiceClient(e.conn)
	desc := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{
		{Key: "tenant", Value: "acme"}, {Key: "plan", Value: "free"}}}}}
	admitted := 0
	for range 20 {
		r, err := rls.ShouldRateLimit(context.Background(), desc)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetOverallCode() == ratelimitv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 10-taken {
		t.Errorf("RLS admitted %d after the quota service took %d of 10", admitted, taken)
	}
}
