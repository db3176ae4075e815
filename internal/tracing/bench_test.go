package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-dev/sluice/internal/check"
)

// BenchmarkCheck is a check as the intakes make it, over the memory store:
// untraced (the checker alone), with tracing off (a nil Tracer) and on
// (every span sampled, batched to an exporter that drops them: the SDK's
// cost without the network's), and on with the sampler dropping every
// check.
//
//	go test ./internal/tracing/ -run '^$' -bench Check -benchmem -count 5
func BenchmarkCheck(b *testing.B) {
	b.Run("untraced", func(b *testing.B) {
		tc := newTracedCheck(b, nil, roomy)
		ctx, in := context.Background(), check.Input{Namespace: "ns", Request: tc.req}
		b.ReportAllocs()
		for b.Loop() {
			if err := tc.checker.CheckInto(ctx, in, &tc.out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("off", func(b *testing.B) { benchmarkCheck(b, nil) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		benchmarkCheck(b, New(tp, SystemMemory))
	})
	b.Run("on-unsampled", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithBatcher(discard{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		benchmarkCheck(b, New(tp, SystemMemory))
	})
}

func benchmarkCheck(b *testing.B, tr *Tracer) {
	tc := newTracedCheck(b, tr, roomy)
	b.ReportAllocs()
	for b.Loop() {
		tc.run(b)
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
