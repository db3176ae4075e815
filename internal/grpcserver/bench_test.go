package grpcserver

import (
	"context"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// BenchmarkShouldRateLimit measures the service's own work per call (parse
// the request's bytes, decide in the memory store, render into a reused
// response), without gRPC's transport, with metrics as a server has them:
// one descriptor and three, each allowed, and a denial the cache of
// denials answers (a flood of an over-limit client).
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, c := range []struct {
		name        string
		descriptors int
		limit       string
		want        ratelimitv3.RateLimitResponse_Code
	}{
		{"descriptors=1", 1, "1000000000", rlsOK},
		{"descriptors=3", 3, "1000000000", rlsOK},
		{"denied", 1, "1", rlsOver},
	} {
		b.Run(c.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			s, err := New(Options{Domains: DomainBindings{"edge": "ns"}, Registerer: reg, Checker: checktest.New(b, check.Options{Metrics: check.NewMetrics(reg)},
				compile(b, "ns", "client", "match: {descriptor: [{key: remote_address}]}\nlimits: [{name: l, fixedWindow: {limit: "+c.limit+", window: 1h}}]"),
				compile(b, "ns", "route", "match: {descriptor: [{key: generic_key}]}\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]"),
				compile(b, "ns", "user", "match: {descriptor: [{key: user}]}\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]"),
			)})
			if err != nil {
				b.Fatal(err)
			}
			r := newRLS(s)
			descriptors := []*ratelimitcommonv3.RateLimitDescriptor{
				rlsDescriptor("remote_address", "10.0.0.1"), rlsDescriptor("generic_key", "api"), rlsDescriptor("user", "u1")}
			req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: descriptors[:c.descriptors]}
			for range 2 { // the denied case's limit spent, and its denial remembered
				if _, err := r.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			stream := newWireStream(b, req, c.want)
			b.ReportAllocs()
			for b.Loop() {
				if err := r.serveShouldRateLimit(stream); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// wireStream is a call's stream as serveShouldRateLimit sees it, without
// a transport: it gives req's bytes to the server's codec, and checks
// that the answer has the code want.
type wireStream struct {
	grpc.ServerStream
	t     testing.TB
	codec serverCodec
	req   mem.BufferSlice
	want  ratelimitv3.RateLimitResponse_Code
}

func newWireStream(t testing.TB, req *ratelimitv3.RateLimitRequest, want ratelimitv3.RateLimitResponse_Code) *wireStream {
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return &wireStream{t: t, codec: newServerCodec(), req: mem.BufferSlice{mem.SliceBuffer(b)}, want: want}
}

func (s *wireStream) Context() context.Context { return context.Background() }

func (s *wireStream) RecvMsg(m any) error {
	return s.codec.Unmarshal(s.req, m)
}

func (s *wireStream) SendMsg(m any) error {
	if got := m.(*ratelimitv3.RateLimitResponse).GetOverallCode(); got != s.want {
		s.t.Fatalf("answered %v, want %v", got, s.want)
	}
	return nil
}
