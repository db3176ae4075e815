// Package grpctest runs `manager local --grpc-listen` (built from this
// tree) and calls its gRPC endpoint with a real gRPC client: ext_authz
// decisions that share their counters with the HTTP endpoint, the health
// service, reflection, and a clean stop on SIGTERM.
//
//	go test ./test/grpc/ -v
package grpctest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "grpc") }

// policy allows 3 requests an hour to /api/ of one namespace.
const policy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: shop
spec:
  match: {paths: ["/api/*"]}
  key: global
  limits:
  - name: hourly
    fixedWindow: {limit: 3, window: 1h}
`

func TestLocalModeServesExtAuthz(t *testing.T) {
	p, httpAddr, grpcAddr := manager.StartLocalProcess(t, nil, policy, "--grpc-default-namespace", "shop")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", health, err)
	}
	services := listServices(ctx, t, conn)
	if !strings.Contains(services, "envoy.service.auth.v3.Authorization") {
		t.Errorf("reflection lists %s", services)
	}

	// One request through the HTTP endpoint, then the gRPC one: the same
	// checker and store, so the limit of 3 leaves 2.
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/check/shop", nil)
	req.Header.Set("X-Original-URL", "http://shop.example.com/api/items")
	req.Header.Set("X-Original-Method", "GET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP check: %d", resp.StatusCode)
	}
	authz := authv3.NewAuthorizationClient(conn)
	var got []string
	for range 4 {
		r, err := authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Host: "shop.example.com", Path: "/api/items?page=2", Headers: map[string]string{"user-agent": "test"}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v/%d", codes.Code(r.GetStatus().GetCode()), r.GetDeniedResponse().GetStatus().GetCode()))
	}
	want := "OK/0 OK/0 ResourceExhausted/429 ResourceExhausted/429"
	if strings.Join(got, " ") != want {
		t.Errorf("gRPC checks after one HTTP check: %v, want %s", got, want)
	}

	p.Stop()
	if exited, err := p.Exited(); !exited || err != nil {
		t.Errorf("after SIGTERM: exited %v, %v; want a clean exit", exited, err)
	}
}

func listServices(ctx context.Context, t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.CloseSend() }()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, " ")
}
