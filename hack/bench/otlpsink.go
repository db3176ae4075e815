package main

import (
	"context"
	"net"
	"os"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// otlpSink receives spans over OTLP/gRPC and drops them: the collector a
// traced Sluice exports to, costing the run as little as a receiver can.
type otlpSink struct {
	collectorpb.UnimplementedTraceServiceServer
}

func (otlpSink) Export(context.Context, *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// serveOTLPSink is `bench serve-otlp-sink`.
func serveOTLPSink(args []string) error {
	return serveGRPC("serve-otlp-sink", args, func(srv *grpc.Server) { collectorpb.RegisterTraceServiceServer(srv, otlpSink{}) })
}

// startOTLPSink starts the sink and returns the OTLP endpoint of a traced
// configuration's environment.
func (ps *processes) startOTLPSink() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	addr := freeAddr()
	if _, err := ps.start(self, "serve-otlp-sink", "--listen", addr); err != nil {
		return "", err
	}
	return "http://" + addr, waitFor(func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}
