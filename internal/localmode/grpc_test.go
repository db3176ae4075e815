package localmode

import (
	"context"
	"net"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/grpcserver"
)

// Local mode serves ext_authz from the folder's policies, and the gRPC
// checks count against the same buckets as the HTTP ones.
func TestLocalModeServesGRPC(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", limitPolicy(2))
	ctx, cancel := context.WithCancel(context.Background())
	app, err := New(ctx, Config{PoliciesDir: dir, Config: checkserver.Config{PollInterval: 100 * time.Millisecond, GRPC: grpcserver.Config{Listen: "unused", DefaultNamespace: "default"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.ServeWithGRPC(ctx, ln, grpcLn) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	if s := status(t, "http://"+ln.Addr().String()); s != 200 {
		t.Fatalf("HTTP check: %d", s)
	}
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)
	var got []codes.Code
	for range 2 {
		resp, err := client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Host: "example.com", Path: "/"},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, codes.Code(resp.GetStatus().GetCode()))
	}
	if got[0] != codes.OK || got[1] != codes.ResourceExhausted {
		t.Errorf("gRPC checks after one HTTP check, limit 2: %v, want [OK ResourceExhausted]", got)
	}
}
