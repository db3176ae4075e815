package admin

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// Inspect of a bucket shows what each Envoy holds of it through the
// rate limit quota service, with its last report, while its stream is
// open.
func TestInspectQuotaShares(t *testing.T) {
	store := storetest.Redis(t, redistest.Start(t).Addr()).Backend()
	c := checktest.New(t, check.Options{Backend: store}, policytest.Compile(t, "shop", "quota",
		"match: {domain: edge, descriptor: [{key: tenant}]}\nkey: '{descriptor:tenant}'\nlimits: [{name: h, fixedWindow: {limit: 1000, window: 1h}}]"))
	svc, err := rlqs.New(rlqs.Options{Checker: c, Domains: map[string]string{"edge": "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := New(Options{Checker: c, Quota: svc})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), "tester")))
	}))
	t.Cleanup(srv.Close)
	f := &fixture{t: t, checker: c, server: srv}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := make([]rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, 2)
	for i := range streams {
		if streams[i], err = rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx); err != nil {
			t.Fatal(err)
		}
		if err := streams[i].Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, NumRequestsAllowed: uint64(1 + i)}, // none denied: no top-up follows
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := streams[i].Recv(); err != nil {
			t.Fatal(err)
		}
	}
	var ks adminapi.KeyState
	f.call("GET", "/namespaces/shop/ratelimitpolicies/quota/keys?key=acme", "", &ks)
	if len(ks.Quota) != 2 {
		t.Fatalf("quota shares: %+v, want one per stream", ks.Quota)
	}
	for i, q := range ks.Quota {
		if q.Action != "token_bucket" || q.MaxTokens < 1 || q.TokensPerFill < 1 || q.Reserved != q.MaxTokens+5*q.TokensPerFill || q.Interval != "5s" || q.Allowed != uint64(1+i) || q.Reported == "" || q.Envoy == "" {
			t.Errorf("share %d: %+v", i, q)
		}
	}
	if ks.Quota[0].Envoy == ks.Quota[1].Envoy {
		t.Errorf("two streams under one name: %+v", ks.Quota)
	}

	_ = streams[0].CloseSend()
	deadline := time.Now().Add(5 * time.Second)
	for len(ks.Quota) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's share is still shown: %+v", ks.Quota)
		}
		time.Sleep(20 * time.Millisecond)
		ks = adminapi.KeyState{}
		f.call("GET", "/namespaces/shop/ratelimitpolicies/quota/keys?key=acme", "", &ks)
	}
}
