package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sluice-dev/sluice/internal/buildinfo"
)

// FromEnv returns the process's tracer provider as the standard OTEL_*
// variables configure it, or nil when tracing is off: the default, unless
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set; OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off
// too. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks grpc or http/protobuf
// (the default); the exporters read the endpoints, headers, timeouts and
// TLS settings, and the SDK the sampler (OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, default parentbased_always_on), the service
// name (OTEL_SERVICE_NAME, default sluice) and OTEL_RESOURCE_ATTRIBUTES.
// A setting it cannot use is logged and tracing stays off: traces never
// keep a check process from starting.
func FromEnv(log *slog.Logger) *sdktrace.TracerProvider {
	if !enabled(os.Getenv) {
		return nil
	}
	tp, err := fromEnv(context.Background(), os.Getenv)
	if err != nil {
		log.Error("tracing off", "err", err)
		return nil
	}
	return tp
}

// enabled reports whether getenv's variables ask for traces.
func enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func fromEnv(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	exporter, err := newExporter(ctx, getenv)
	if err != nil {
		return nil, err
	}
	// Later detectors win: the variables over the defaults.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("sluice"), semconv.ServiceVersion(buildinfo.Get().Version)),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}

// newExporter is the OTLP exporter of the protocol the variables name.
func newExporter(ctx context.Context, getenv func(string) string) (*otlptrace.Exporter, error) {
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", protocol)
	}
}
