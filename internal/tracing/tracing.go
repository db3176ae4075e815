// Package tracing traces checks with OpenTelemetry: a span per check at
// every intake, a child of the caller's W3C traceparent, with the decision
// and the policies and limits that made it, and a child span per store
// call. A nil *Tracer is tracing off, and costs a check one comparison: no
// allocation, no clock read.
package tracing

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Intake names the transport a check came in on: the check span's
// sluice.intake attribute.
type Intake string

const (
	IntakeHTTP       Intake = "http"       // the proxies' check endpoint (/check/, /envoy/)
	IntakeAPI        Intake = "v1/check"   // POST /v1/check
	IntakeExtAuthz   Intake = "ext_authz"  // Envoy's ext_authz v3 over gRPC
	IntakeRLS        Intake = "rls"        // Envoy's rate limit service v3
	IntakeRLQS       Intake = "rlqs"       // a reservation of Envoy's rate limit quota service v3
	IntakeMiddleware Intake = "middleware" // the net/http middleware
)

// Span names.
const (
	CheckSpan = "sluice.check"
	StoreSpan = "sluice.store"
)

// Store systems: the store span's db.system attribute.
const (
	SystemRedis  = "redis"
	SystemMemory = "memstore"
)

// Tracer starts the spans of checks. A nil *Tracer traces nothing.
type Tracer struct {
	tracer trace.Tracer
	system string
	// traceparent reads the caller's W3C trace context (and tracestate).
	traceparent propagation.TraceContext
}

// New returns a Tracer over tp whose store spans name system (SystemRedis
// or SystemMemory); nil, tracing off, when tp is nil.
func New(tp trace.TracerProvider, system string) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{tracer: tp.Tracer("github.com/sluice-dev/sluice"), system: system}
}

// Span is one check's span; the zero Span is tracing off.
type Span struct {
	span trace.Span
}

// StartHTTP starts the span of a check in namespace that came with header:
// a child of the span in ctx (the middleware's, when the service traces
// its requests), else of the header's traceparent.
func (t *Tracer) StartHTTP(ctx context.Context, intake Intake, namespace string, header http.Header) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.traceparent.Extract(ctx, propagation.HeaderCarrier(header))
	}
	return t.start(ctx, intake, namespace)
}

// StartGRPC starts the span of a check in namespace that came on a gRPC
// call: a child of the traceparent in the call's metadata (Envoy's).
func (t *Tracer) StartGRPC(ctx context.Context, intake Intake, namespace string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = t.traceparent.Extract(ctx, metadataCarrier(md))
	}
	return t.start(ctx, intake, namespace)
}

func (t *Tracer) start(ctx context.Context, intake Intake, namespace string) (context.Context, Span) {
	ctx, s := t.tracer.Start(ctx, CheckSpan, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("sluice.intake", string(intake)), attribute.String("sluice.namespace", namespace)))
	return ctx, Span{span: s}
}

// Check span attributes.
const (
	attrDecision   = "sluice.decision"         // allowed or denied
	attrReason     = "sluice.reason"           // check.Reason
	attrPolicies   = "sluice.policies"         // the matching policies, namespace/name
	attrPolicy     = "sluice.policy"           // the policy that decided
	attrLimit      = "sluice.limit"            // the limit the answer reports
	attrDenied     = "sluice.denied_limits"    // every limit that denied, namespace/policy/limit
	attrShadow     = "sluice.shadow_limits"    // of those, the shadow limits (which denied nothing)
	attrSoftOver   = "sluice.soft_over_limits" // the soft limits the request went on over
	attrRemaining  = "sluice.remaining"
	attrRetryAfter = "sluice.retry_after_ms"
	attrCached     = "sluice.cached"   // the denial came from the cache of denials
	attrDegraded   = "sluice.degraded" // the failure mode answered
)

// End records the outcome of the check, or its error, and ends the span.
func (s Span) End(out *check.Outcome, err error) {
	if s.span == nil {
		return
	}
	defer s.span.End()
	if !s.span.IsRecording() { // not sampled: nothing of this is kept
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
		return
	}
	decision := "allowed"
	if !out.Allowed {
		decision = "denied"
	}
	policies := make([]string, len(out.Policies))
	for i, p := range out.Policies {
		policies[i] = p.Policy.Namespace + "/" + p.Policy.Name
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrDecision, decision), attribute.String(attrReason, string(out.Reason)),
		attribute.StringSlice(attrPolicies, policies),
	}
	if out.Decider != nil {
		attrs = append(attrs, attribute.String(attrPolicy, out.Decider.Namespace+"/"+out.Decider.Name))
	}
	if l := out.Reporting(); l != nil {
		attrs = append(attrs, attribute.String(attrLimit, l.Limit.Name), attribute.Int64(attrRemaining, l.Remaining), attribute.Bool(attrCached, l.Cached))
	}
	attrs = append(attrs, limitsAttrs(out)...)
	if !out.Allowed && out.RetryAfter != ratelimit.Never {
		attrs = append(attrs, attribute.Int64(attrRetryAfter, out.RetryAfter.Milliseconds()))
	}
	if out.Degraded {
		attrs = append(attrs, attribute.Bool(attrDegraded, true))
		s.span.RecordError(out.StoreErr)
	}
	s.span.SetAttributes(attrs...)
}

// Backend returns b with its store's checks traced, each a child span of
// the check's; b itself when t is nil. Only the checks change: the rest
// of b is the store's.
func (t *Tracer) Backend(b ratelimit.Backend) ratelimit.Backend {
	if t != nil {
		b.Store = &tracedStore{Store: b.Store, t: t}
	}
	return b
}

type tracedStore struct {
	ratelimit.Store
	t *Tracer
}

func (s *tracedStore) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	ctx, span := s.t.tracer.Start(ctx, StoreSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", s.t.system), attribute.Int("sluice.entries", len(req.Entries))))
	defer span.End()
	err := s.Store.Check(ctx, timeout, req, dec)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// metadataCarrier reads gRPC metadata as a propagation carrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, strings.ToLower(k))
	}
	return keys
}

// limitsAttrs are the attributes naming limits over: every limit that
// denied (shadow and soft ones included, as before they had modes of
// their own), the shadow ones among them, and the soft ones the request
// went on over.
func limitsAttrs(out *check.Outcome) []attribute.KeyValue {
	var denied, shadow, soft []string
	for i := range out.Limits {
		l := &out.Limits[i]
		if l.Allowed {
			continue
		}
		name := l.Policy.Namespace + "/" + l.Policy.Name + "/" + l.Limit.Name
		denied = append(denied, name)
		switch {
		case l.Limit.Shadow():
			shadow = append(shadow, name)
		case out.SoftOver(l):
			soft = append(soft, name)
		}
	}
	var attrs []attribute.KeyValue
	for _, a := range []struct {
		key   string
		names []string
	}{{attrDenied, denied}, {attrShadow, shadow}, {attrSoftOver, soft}} {
		if a.names != nil {
			attrs = append(attrs, attribute.StringSlice(a.key, a.names))
		}
	}
	return attrs
}
