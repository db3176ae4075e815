package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// The check process serves the gRPC endpoint beside the HTTP one when
// --grpc-listen is set, answers ext_authz from the policy table, and stops
// both when its context ends.
func TestCheckServerServesGRPC(t *testing.T) {
	srv := redistest.Start(t)
	parts, err := connectRedis(&redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	grpcAddr := freeAddr(t)
	cs, err := newCheckServer(CheckConfig{Config: checkserver.Config{
		Listen: freeAddr(t), PollInterval: 100 * time.Millisecond,
		GRPC:   grpcserver.Config{Listen: grpcAddr, DefaultNamespace: "default"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}, parts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cs.run(ctx) }()

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer callCancel()
	health, err := healthpb.NewHealthClient(conn).Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", health, err)
	}
	resp, err := authv3.NewAuthorizationClient(conn).Check(callCtx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Host: "h", Path: "/"},
	}}})
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("a check with no policies: %v %v, want an allow", resp, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

// A certificate that cannot be read, or a taken --grpc-listen port, fails
// the process at start.
func TestCheckServerGRPCStartErrors(t *testing.T) {
	parts, err := connectRedis(&redisconn.Config{URL: "redis://127.0.0.1:1/0"}, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = newCheckServer(CheckConfig{Config: checkserver.Config{Logger: log, GRPC: grpcserver.Config{Listen: "127.0.0.1:0", TLSCertFile: "/nonexistent/cert.pem", TLSKeyFile: "/nonexistent/key.pem"}}}, parts)
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("unreadable certificate: %v", err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cs, err := newCheckServer(CheckConfig{Config: checkserver.Config{Listen: freeAddr(t), Logger: log, GRPC: grpcserver.Config{Listen: taken.Addr().String()}}}, parts)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--grpc-listen") {
		t.Errorf("taken gRPC port: %v", err)
	}
}
