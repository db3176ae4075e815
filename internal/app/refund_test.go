package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// Two check processes on one Redis: A denies a bucket and remembers the
// denial; B refunds the bucket (Envoy's negative hits); A hears of it on
// the policy table's channel and admits the next charge, well before the
// denial's retry time (an hour).
func TestRefundReachesTheOtherCheckProcesses(t *testing.T) {
	srv := redistest.Start(t)
	redisCfg := &redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}
	spec := policytest.Spec(t, "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := policytable.New(srv.Client())
	if _, _, err := table.Replace(ctx, []*policytable.Entry{{Namespace: "ns", Name: "api", Generation: 1, Spec: spec}}, nil); err != nil {
		t.Fatal(err)
	}

	replica := func() ratelimitv3.RateLimitServiceClient {
		parts, err := connectRedis(redisCfg, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(parts.Close)
		grpcAddr := freeAddr(t)
		cs, err := newCheckServer(CheckConfig{Config: checkserver.Config{
			Listen: freeAddr(t), PollInterval: time.Hour, // changes by message only
			GRPC:   grpcserver.Config{Listen: grpcAddr, Domains: grpcserver.DomainBindings{"edge": "ns"}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}}, parts)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cs.run(runCtx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("check server: %v", err)
			}
		})
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return ratelimitv3.NewRateLimitServiceClient(conn)
	}
	send := func(c ratelimitv3.RateLimitServiceClient, d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	charge := func() *ratelimitcommonv3.RateLimitDescriptor {
		return &ratelimitcommonv3.RateLimitDescriptor{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}
	}
	peek := func() *ratelimitcommonv3.RateLimitDescriptor {
		d := charge()
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	a, b := replica(), replica()
	for _, c := range []ratelimitv3.RateLimitServiceClient{a, b} {
		for send(c, peek()).GetStatuses()[0].GetCurrentLimit() == nil { // the table is loaded
			if ctx.Err() != nil {
				t.Fatal("a check process never loaded the policy table")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	for i, want := range []ratelimitv3.RateLimitResponse_Code{ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OVER_LIMIT} {
		if got := send(a, charge()).GetOverallCode(); got != want {
			t.Fatalf("A, charge %d: %v, want %v", i+1, got, want)
		}
	}
	refund := charge()
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(1), true
	if resp := send(b, refund); resp.GetOverallCode() != ratelimitv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("B, refund: %v remaining %d, want OK with 1", resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining())
	}
	// Until the message arrives A answers from its cache, which charges
	// nothing; then the store admits. The bound is the message's delivery
	// (README, "Cache of denials"); the deadline only keeps a broken build
	// from waiting for the hour.
	deadline := time.Now().Add(10 * time.Second)
	start := time.Now()
	for send(a, charge()).GetOverallCode() != ratelimitv3.RateLimitResponse_OK {
		if time.Now().After(deadline) {
			t.Fatal("A still denies the refunded bucket from its cache 10s after B's refund")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("A admitted %s after B's refund", time.Since(start).Round(time.Millisecond))
	if got := send(a, charge()).GetOverallCode(); got != ratelimitv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("A admitted the refunded unit twice: %v", got)
	}
}
