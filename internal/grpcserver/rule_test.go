package grpcserver

import (
	"context"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// With ReportPolicy, ext_authz and rate limit service answers carry the
// rule that decided as dynamic metadata, allowed or denied; without it,
// none.
func TestRuleMetadata(t *testing.T) {
	p := compile(t, "shop", "api", "match: {paths: [/api/*]}\nkey: '{client_ip}'\nlimits: [{name: burst, fixedWindow: {limit: 1, window: 1m}}]")
	d := compile(t, "shop", "rls", "match: {descriptor: [{key: k}]}\nkey: '{descriptor:k}'\nlimits: [{name: burst, fixedWindow: {limit: 1, window: 1m}}]")
	authzReq := req{host: "shop.example.com", path: "/api/items", source: "203.0.113.5", extensions: shop}.proto()
	rlsReq := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}}
	for _, report := range []bool{true, false} {
		e := start(t, memstore.New().Backend(), Options{ReportPolicy: report, Domains: DomainBindings{"edge": "shop"}}, nil, p, d)
		var got []*structpb.Struct
		for range 2 {
			a, err := e.authz.Check(context.Background(), authzReq)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a.GetDynamicMetadata())
		}
		rls := ratelimitv3.NewRateLimitServiceClient(e.conn)
		for range 2 {
			r, err := rls.ShouldRateLimit(context.Background(), rlsReq)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.GetDynamicMetadata())
		}
		for i, md := range got {
			if !report {
				if md != nil {
					t.Errorf("answer %d without ReportPolicy: metadata %v", i, md)
				}
				continue
			}
			f := md.GetFields()
			policy, decision := []string{"shop/api", "shop/rls"}[i/2], []string{"allowed", "denied"}[i%2]
			if f["policy"].GetStringValue() != policy || f["decision"].GetStringValue() != decision || f["limit"].GetStringValue() != "burst" ||
				f["remaining"].GetNumberValue() != 0 || len(f["key_hash"].GetStringValue()) != 16 {
				t.Errorf("answer %d: metadata %v, want %s, %s, burst, 0 remaining, a key hash", i, md, policy, decision)
			}
		}
	}
}
