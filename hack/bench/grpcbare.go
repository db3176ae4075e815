package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sluice-dev/sluice/internal/grpcserver"
)

// rlsMethod is the RPC every RLS run calls, as ghz names it.
const rlsMethod = "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit"

// bareRLS answers every ShouldRateLimit with OK, one OK status per
// descriptor, and does nothing else: the ceiling of any rate limit service
// written with grpc-go on this machine.
type bareRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (bareRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}

// serveBareGRPC is `bench serve-bare-grpc`: bareRLS with the server
// options that carry Sluice's calls (grpcserver.TransportOptions), so the
// ceiling differs from Sluice by the service's work alone.
func serveBareGRPC(args []string) error {
	return serveGRPC("serve-bare-grpc", args, func(srv *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(srv, bareRLS{}) },
		grpcserver.TransportOptions()...)
}

// serveGRPC is a `bench serve-*` subcommand named name: a gRPC server with
// opts (none: grpc-go's defaults) and the services register adds, on
// --listen.
func serveGRPC(name string, args []string, register func(*grpc.Server), opts ...grpc.ServerOption) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	return srv.Serve(ln)
}

// writeProtoset writes the RLS v3 service's file descriptor and every file
// it imports, dependencies first, as a FileDescriptorSet: ghz reads the
// method's types from it, so no server under test needs reflection.
func writeProtoset(path string) error {
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(&set)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// rlsClient asks one server single questions, outside the load: that it is
// up, and that it answers a scenario's request as the scenario expects.
type rlsClient struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

func dialRLS(addr string) (*rlsClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &rlsClient{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn)}, nil
}

func (c *rlsClient) Close() error { return c.conn.Close() }

// ask sends one request and returns its overall code.
func (c *rlsClient) ask(ctx context.Context, req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, error) {
	resp, err := c.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		return rlsv3.RateLimitResponse_UNKNOWN, err
	}
	return resp.GetOverallCode(), nil
}

// rlsRequest builds a request of domain with one descriptor per list of
// key, value pairs.
func rlsRequest(domain string, descriptors ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// rlsExchange is a request and the overall code it must be answered with.
type rlsExchange struct {
	what string // for the error
	req  *rlsv3.RateLimitRequest
	want rlsv3.RateLimitResponse_Code
}

// mustAnswer asks the server at addr each request in turn, each within a
// second, and checks its answer.
func mustAnswer(addr string, exchanges ...rlsExchange) error {
	c, err := dialRLS(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, x := range exchanges {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := c.ask(ctx, x.req)
		cancel()
		if err == nil && got != x.want {
			err = fmt.Errorf("answered %s, want %s", got, x.want)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", x.what, err)
		}
	}
	return nil
}
