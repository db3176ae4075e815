package limits

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// startLocalGRPC is startLocalPolicies with the gRPC endpoint on a port of
// its own (ext_authz checks of namespace default); it returns the HTTP
// and gRPC addresses and the policies folder.
func startLocalGRPC(t *testing.T, args ...string) (string, string, string, *systest.Proc) {
	t.Helper()
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	addr, policies, p := startLocalPolicies(t, append([]string{"--grpc-listen", grpcAddr, "--grpc-default-namespace", "default"}, args...)...)
	p.WaitTCP(t, grpcAddr, 20*time.Second)
	return addr, grpcAddr, policies, p
}

// grpcClient is a well-behaved gRPC client (as Envoy is) from 127.0.0.1,
// connected by its first call.
func grpcClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// grpcAnswers asks the health service and one ext_authz check on conn and
// fails t unless both answer: SERVING, and the check allowed by the policy.
func grpcAnswers(t *testing.T, conn *grpc.ClientConn, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health %s: %v %v", when, h.GetStatus(), err)
	}
	r, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Host: "example.com", Path: "/api", Headers: map[string]string{"x-client": "grpc-client"}},
	}}})
	if err != nil {
		t.Fatalf("ext_authz check %s: %v", when, err)
	}
	if code := codes.Code(r.GetStatus().GetCode()); code != codes.OK || r.GetOkResponse() == nil {
		t.Fatalf("ext_authz check %s: %v, want OK (allowed by the policy)", when, code)
	}
}

// healthz asks /healthz on a new connection.
func healthz(t *testing.T, addr, when string) {
	t.Helper()
	client := http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz %s: %v", when, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz %s: %d", when, resp.StatusCode)
	}
}

// policyHeader sends one check on a new connection and returns its
// RateLimit-Policy header.
func policyHeader(t *testing.T, addr string) string {
	t.Helper()
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, checkRequest); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	resp.Body.Close()
	return resp.Header.Get("RateLimit-Policy")
}

// reloads edits the policy file (limit 1000 to 999 an hour) and waits until
// checks are decided by the edited policy.
func reloads(t *testing.T, p *systest.Proc, addr, policies string) {
	t.Helper()
	edited := strings.Replace(policy, "limit: 1000", "limit: 999", 1)
	if err := os.WriteFile(filepath.Join(policies, "per-client.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		alive(t, p)
		if got = policyHeader(t, addr); strings.Contains(got, ";q=999;") {
			return
		}
	}
	t.Fatalf("policy edit not in force: RateLimit-Policy %q, want q=999", got)
}

// waitMetric waits until the series is at least atLeast on the HTTP
// endpoint's /metrics, and returns its value.
func waitMetric(t *testing.T, addr, series string, atLeast float64) float64 {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v = metric(t, metrics(t, addr), series); v >= atLeast {
			return v
		}
	}
	t.Fatalf("%s = %v, want at least %v", series, v, atLeast)
	return v
}

// TestGRPCFloodUnderLowFileLimit: under an open-file limit of 256, six
// hundred idle connections to the gRPC port (no HTTP/2 preface) used to
// take every descriptor, so that the HTTP endpoint, /healthz and policy
// reloads stopped. With the gRPC listener's caps inside the budget it
// shares with HTTP, the flood is closed as it arrives; HTTP/2 clients
// that open streams without end or cancel them at once (rapid reset) are
// held to the advertised streams per connection; and HTTP checks,
// /healthz, a gRPC client connected before the flood and policy reloads
// keep working throughout.
func TestGRPCFloodUnderLowFileLimit(t *testing.T) {
	addr, grpcAddr, policies, p := startLocalGRPC(t)
	envoy := grpcClient(t, grpcAddr)
	grpcAnswers(t, envoy, "before the flood")

	// Streams opened and never finished: the server advertises a bound
	// and refuses the streams over it.
	const streams = 1000
	var held []*h2Conn
	for range 2 {
		h := dialH2(t, "127.0.0.4", grpcAddr)
		for range streams {
			if !h.open(false) {
				t.Fatalf("HTTP/2 connection closed after %d streams: %v", h.sent.Load(), h.readErr)
			}
		}
		held = append(held, h)
	}
	// Rapid reset: streams opened and canceled in a loop, all along.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	rapid := dialH2(t, "127.0.0.5", grpcAddr)
	go rapid.rapidReset(stop)

	flood := startIdleFlood(t, grpcAddr, 300, "127.0.0.2", "127.0.0.3")
	for deadline := time.Now().Add(60 * time.Second); flood.dials.Load() < 600; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the flood dialed %d connections, want 600", flood.dials.Load())
		}
	}
	for round := range 3 {
		when := fmt.Sprintf("during the flood (round %d)", round+1)
		alive(t, p)
		healthz(t, addr, when)
		if err := checkOnce(t, "127.0.0.1", addr); err != nil {
			t.Fatalf("HTTP check %s: %v", when, err)
		}
		grpcAnswers(t, envoy, when)
		time.Sleep(200 * time.Millisecond)
	}
	reloads(t, p, addr, policies)

	for i, h := range held {
		if got := h.maxStreams.Load(); got <= 0 || got >= streams {
			t.Errorf("HTTP/2 connection %d: the server's SETTINGS_MAX_CONCURRENT_STREAMS is %d, want a bound under %d", i+1, got, streams)
			continue
		}
		h.waitRefused(t, streams-h.maxStreams.Load())
	}
	rejected := waitMetric(t, addr, `sluice_grpc_rejected_connections_total{reason="max_connections"}`, 500)
	open := metric(t, metrics(t, addr), "sluice_grpc_open_connections")
	if open > openFiles/4*3 {
		t.Errorf("gRPC connections open: %v, more than the descriptor budget (%d)", open, openFiles/4*3)
	}
	grpcAnswers(t, envoy, "after the reload")
	alive(t, p)
	t.Logf("gRPC connections: %v open, %v closed over the cap; idle flood: %d dials, %d closed by the server; rapid reset: %d streams",
		open, rejected, flood.dials.Load(), flood.closed.Load(), rapid.sent.Load())
}

// TestGRPCConnectionCaps: connections over --grpc-max-connections-per-peer
// are closed as they arrive, so a flood from two addresses leaves room for
// a new client from a third; and a connection that never sends the
// HTTP/2 preface is closed after the handshake deadline.
func TestGRPCConnectionCaps(t *testing.T) {
	addr, grpcAddr, _, _ := startLocalGRPC(t, "--grpc-max-connections=60", "--grpc-max-connections-per-peer=20")
	silent := dialFrom(t, "127.0.0.6", grpcAddr)
	opened := time.Now()

	startIdleFlood(t, grpcAddr, 100, "127.0.0.2", "127.0.0.3")
	waitMetric(t, addr, `sluice_grpc_rejected_connections_total{reason="max_connections_per_peer"}`, 160)
	grpcAnswers(t, grpcClient(t, grpcAddr), "on a new connection during a flood from two addresses")

	// grpc-go's own deadline is 120 s; the endpoint's is shorter.
	_ = silent.SetReadDeadline(opened.Add(100 * time.Second))
	// The server sends its SETTINGS first, then waits for the preface.
	if _, err := io.Copy(io.Discard, silent); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection without the HTTP/2 preface: %v; want it closed by the server", err)
	}
	t.Logf("a connection without the HTTP/2 preface was closed after %s", time.Since(opened).Round(100*time.Millisecond))
}
