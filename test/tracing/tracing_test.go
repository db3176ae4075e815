// Package tracingtest runs `manager local` (built from this tree) with its
// traces sent to an OTLP receiver the test starts on loopback, over each
// OTLP protocol, and checks that a check's span arrives as the child of
// the traceparent the caller sent: over the HTTP check endpoint, ext_authz
// and the rate limit service; and that the decision log's lines name the same trace.
//
//	go test ./test/tracing/ -v
package tracingtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "tracing") }

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
    fixedWindow: {limit: 100, window: 1h}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
  namespace: shop
spec:
  match:
    domain: edge
    descriptor:
    - key: remote_address
  key: "{descriptor:remote_address}"
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
`

// The callers' spans: one trace per intake.
const (
	httpTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	grpcTrace  = "0af7651916cd43dd8448eb211c80319c"
	rlsTrace   = "5b8aa5a2d2c872e8321cf37308d69df2"
	parentSpan = "00f067aa0ba902b7"
)

func TestChecksAreTracedOverOTLP(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			spans := &receiver{}
			endpoint := spans.serve(t, protocol)
			httpAddr, grpcAddr := startManager(t, endpoint, protocol)

			req, _ := http.NewRequest("GET", "http://"+httpAddr+"/check/shop", nil)
			req.Header.Set("X-Original-URL", "http://shop.example.com/api/items")
			req.Header.Set("X-Original-Method", "GET")
			req.Header.Set("Traceparent", "00-"+httpTrace+"-"+parentSpan+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP check: %d", resp.StatusCode)
			}

			conn := checkExtAuthz(t, grpcAddr, grpcTrace)
			rlsCtx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+rlsTrace+"-"+parentSpan+"-01")
			rlsCtx, rlsCancel := context.WithTimeout(rlsCtx, 30*time.Second)
			defer rlsCancel()
			if r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(rlsCtx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
			}}); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("rate limit service: %v %v", r, err)
			}

			for trace, want := range map[string][2]string{httpTrace: {"http", "shop/api"}, grpcTrace: {"ext_authz", "shop/api"}, rlsTrace: {"rls", "shop/per-client"}} {
				intake := want[0]
				check := spans.wait(t, trace, "sluice.check")
				if got := hex.EncodeToString(check.GetParentSpanId()); got != parentSpan {
					t.Errorf("%s check span's parent %s, want the caller's %s", intake, got, parentSpan)
				}
				attrs := attributes(check)
				limit := map[string]string{"shop/api": "hourly", "shop/per-client": "minute"}[want[1]]
				for k, want := range map[string]string{"sluice.intake": intake, "sluice.decision": "allowed", "sluice.policy": want[1], "sluice.limit": limit} {
					if attrs[k] != want {
						t.Errorf("%s check span: %s = %q, want %q (all: %v)", intake, k, attrs[k], want, attrs)
					}
				}
				store := spans.wait(t, trace, "sluice.store")
				if string(store.GetParentSpanId()) != string(check.GetSpanId()) {
					t.Errorf("%s store span is not the check span's child", intake)
				}
				if got := attributes(store)["db.system"]; got != "memstore" {
					t.Errorf("%s store span: db.system %q", intake, got)
				}
			}
			if got := spans.service(); got != "sluice-test" {
				t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", got)
			}
		})
	}
}

// startManager runs local mode with its traces sent to endpoint over
// protocol, and returns its HTTP and gRPC addresses.
func startManager(t *testing.T, endpoint, protocol string) (httpAddr, grpcAddr string) {
	env := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_SERVICE_NAME=sluice-test", "OTEL_BSP_SCHEDULE_DELAY=100",
	}
	return manager.StartLocal(t, env, policy, "--grpc-default-namespace", "shop", "--rls-domain", "edge=shop")
}

// receiver is an OTLP trace receiver: it keeps every span exported to it.
type receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	got   []*tracepb.ResourceSpans
	added chan struct{}
}

// serve starts the receiver on a loopback port for protocol and returns
// its endpoint.
func (r *receiver) serve(t *testing.T, protocol string) string {
	r.added = make(chan struct{}, 1)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "grpc" {
		srv := grpc.NewServer()
		collectorpb.RegisterTraceServiceServer(srv, r)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
	} else {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/traces", r.serveHTTP)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return "http://" + ln.Addr().String()
}

func (r *receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var export collectorpb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &export)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&export)
	resp, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (r *receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	r.got = append(r.got, req.GetResourceSpans()...)
	r.mu.Unlock()
	select {
	case r.added <- struct{}{}:
	default:
	}
}

// wait returns the span named name in trace, waiting for its export.
func (r *receiver) wait(t *testing.T, trace, name string) *tracepb.Span {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if s := r.find(trace, name); s != nil {
			return s
		}
		select {
		case <-r.added:
		case <-deadline:
			t.Fatalf("no span %s in trace %s received", name, trace)
		}
	}
}

func (r *receiver) find(trace, name string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.got {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if hex.EncodeToString(s.GetTraceId()) == trace && s.GetName() == name {
					return s
				}
			}
		}
	}
	return nil
}

// service is the service.name of the spans received.
func (r *receiver) service() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.got {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				return kv.GetValue().GetStringValue()
			}
		}
	}
	return ""
}

// attributes are s's string attributes.
func attributes(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.GetAttributes() {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// onePerHour admits one request an hour to /api/: the second is denied.
const onePerHour = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: shop
spec:
  match: {paths: ["/api/*"]}
  key: global
  limits:
  - name: hourly
    fixedWindow: {limit: 1, window: 1h}
`

// TestDecisionLogJoinsTheTrace: with --decision-log, a denial's line
// names the trace the caller sent: the check span's when tracing is on
// (over HTTP and ext_authz, whose trace context is gRPC metadata), the
// caller's traceparent header when tracing is off.
func TestDecisionLogJoinsTheTrace(t *testing.T) {
	t.Run("traced", func(t *testing.T) {
		spans := &receiver{}
		endpoint := spans.serve(t, "grpc")
		file := t.TempDir() + "/decisions.log"
		env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100"}
		httpAddr, grpcAddr := manager.StartLocal(t, env, onePerHour, "--grpc-default-namespace", "shop", "--decision-log", file)
		// The first check, allowed, in a trace of its own; the denied one
		// in httpTrace.
		if got := checkHTTP(t, httpAddr, grpcTrace[16:]+httpTrace[16:]); got != http.StatusOK {
			t.Fatalf("first HTTP check: %d, want 200", got)
		}
		if got := checkHTTP(t, httpAddr, httpTrace); got != http.StatusForbidden {
			t.Fatalf("second HTTP check: %d, want 403", got)
		}
		checkExtAuthz(t, grpcAddr, grpcTrace)

		lines := waitLines(t, file, 2)
		for i, trace := range []string{httpTrace, grpcTrace} {
			line := lines[i]
			check := spans.wait(t, trace, "sluice.check")
			if line["trace_id"] != trace || line["span_id"] != hex.EncodeToString(check.GetSpanId()) {
				t.Errorf("line %d: trace %v span %v, want the check span (trace %s, span %x): %v", i, line["trace_id"], line["span_id"], trace, check.GetSpanId(), line)
			}
			if line["policy"] != "shop/api" || line["limit"] != "hourly" || line["msg"] != "denied" {
				t.Errorf("line %d does not name the denying policy and limit: %v", i, line)
			}
		}
	})
	t.Run("untraced", func(t *testing.T) {
		file := t.TempDir() + "/decisions.log"
		httpAddr, _ := manager.StartLocal(t, nil, onePerHour, "--decision-log", file)
		checkHTTP(t, httpAddr, httpTrace)
		if got := checkHTTP(t, httpAddr, httpTrace); got != http.StatusForbidden {
			t.Fatalf("second HTTP check: %d, want 403", got)
		}
		line := waitLines(t, file, 1)[0]
		if line["trace_id"] != httpTrace || line["span_id"] != parentSpan || line["client"] != "127.0.0.1" {
			t.Errorf("line %v: want the caller's trace %s, span %s and client 127.0.0.1", line, httpTrace, parentSpan)
		}
	})
}

// checkExtAuthz asks ext_authz at grpcAddr about GET /api/items on
// shop.example.com with the caller's trace in the call's metadata, as
// Envoy sends it, and returns the connection (closed when t ends).
func checkExtAuthz(t *testing.T, grpcAddr, trace string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+trace+"-"+parentSpan+"-01")
	if _, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Host: "shop.example.com", Path: "/api/items"},
	}}}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// checkHTTP asks the nginx-style check endpoint about GET /api/items with
// the caller's traceparent in trace, and returns the status.
func checkHTTP(t *testing.T, addr, trace string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/check/shop", nil)
	req.Header.Set("X-Original-URL", "http://shop.example.com/api/items")
	req.Header.Set("X-Original-Method", "GET")
	req.Header.Set("Traceparent", "00-"+trace+"-"+parentSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLines waits until the decision log at path holds n lines, and
// returns them decoded.
func waitLines(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		var lines []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("decision log line %q: %v", l, err)
			}
			lines = append(lines, m)
		}
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("the decision log holds %d lines after 20s, want %d:\n%s", len(lines), n, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
