package tracing

import (
	"context"
	"net/http"
	"net/netip"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

const (
	traceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan = "00f067aa0ba902b7"
)

// tracedCheck is one check as an intake makes it: its span started, the
// check, the span ended.
type tracedCheck struct {
	tracer  *Tracer
	checker *check.Checker
	req     *policy.Request
	out     check.Outcome
}

func newTracedCheck(t testing.TB, tr *Tracer, spec string) *tracedCheck {
	store := storetest.Memory(t, nil)
	p := policytest.Compile(t, "ns", "p", spec)
	c := checktest.New(t, check.Options{Backend: tr.Backend(store.Backend())}, p)
	header := http.Header{"Traceparent": {"00-" + traceID + "-" + parentSpan + "-01"}}
	return &tracedCheck{tracer: tr, checker: c, req: &policy.Request{Method: "GET", Host: "h", Path: "/", Header: header, ClientIP: netip.MustParseAddr("192.0.2.1")}}
}

func (tc *tracedCheck) run(t testing.TB) {
	ctx, span := tc.tracer.StartHTTP(context.Background(), IntakeHTTP, "ns", tc.req.Header)
	err := tc.checker.CheckInto(ctx, check.Input{Namespace: "ns", Request: tc.req}, &tc.out)
	span.End(&tc.out, err)
	if err != nil {
		t.Fatal(err)
	}
}

const roomy = "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]"

// TestOffAllocatesNothing: with tracing off, a traced check allocates
// exactly what the check itself does (internal/check's alloc_test.go holds
// that to its budget).
func TestOffAllocatesNothing(t *testing.T) {
	tc := newTracedCheck(t, nil, roomy)
	ctx, in := context.Background(), check.Input{Namespace: "ns", Request: tc.req}
	bare := func() { _ = tc.checker.CheckInto(ctx, in, &tc.out) }
	traced := func() { tc.run(t) }
	bare()
	traced()
	if b, tr := testing.AllocsPerRun(200, bare), testing.AllocsPerRun(200, traced); tr != b {
		t.Errorf("a check traced with tracing off allocates %v times, untraced %v", tr, b)
	}
}

func TestCheckSpanIsTheCallersChild(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), SystemMemory)
	tc := newTracedCheck(t, tr, "key: '{client_ip}'\nlimits: [{name: burst, fixedWindow: {limit: 1, window: 1h}}]")
	tc.run(t) // allowed
	tc.run(t) // denied by the store
	tc.run(t) // denied from the cache of denials: no store call

	var checks, stores []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case CheckSpan:
			checks = append(checks, s)
		case StoreSpan:
			stores = append(stores, s)
		}
	}
	if len(checks) != 3 || len(stores) != 2 {
		t.Fatalf("%d check spans and %d store spans, want 3 and 2", len(checks), len(stores))
	}
	for i, s := range checks {
		if s.Parent().TraceID().String() != traceID || s.Parent().SpanID().String() != parentSpan || !s.Parent().IsRemote() {
			t.Errorf("check %d: parent %v, want the traceparent's span", i, s.Parent())
		}
	}
	for i, s := range stores {
		if s.Parent().SpanID() != checks[i].SpanContext().SpanID() {
			t.Errorf("store call %d is not its check's child", i)
		}
		if got := attrs(s)["db.system"]; got.AsString() != SystemMemory {
			t.Errorf("store call %d: db.system %v", i, got)
		}
	}
	want := []map[attribute.Key]string{
		{"sluice.intake": "http", "sluice.namespace": "ns", "sluice.decision": "allowed", "sluice.reason": "Allowed", "sluice.policy": "ns/p", "sluice.limit": "burst"},
		{"sluice.decision": "denied", "sluice.reason": "RateLimited", "sluice.policy": "ns/p", "sluice.limit": "burst"},
		{"sluice.decision": "denied", "sluice.policy": "ns/p", "sluice.limit": "burst"},
	}
	for i, w := range want {
		got := attrs(checks[i])
		for k, v := range w {
			if got[k].AsString() != v {
				t.Errorf("check %d: %s = %q, want %q", i, k, got[k].AsString(), v)
			}
		}
	}
	if got := attrs(checks[1])["sluice.denied_limits"].AsStringSlice(); len(got) != 1 || got[0] != "ns/p/burst" {
		t.Errorf("denied check: sluice.denied_limits %v", got)
	}
	if !attrs(checks[2])["sluice.cached"].AsBool() || attrs(checks[1])["sluice.cached"].AsBool() {
		t.Error("sluice.cached is not set on the cached denial alone")
	}
}

func TestGRPCMetadataIsTheParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), SystemRedis)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+traceID+"-"+parentSpan+"-01"))
	_, span := tr.StartGRPC(ctx, IntakeRLS, "ns")
	span.End(&check.Outcome{Allowed: true, Reason: check.ReasonNoPolicy, Tightest: -1}, nil)
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Parent().TraceID().String() != traceID || ended[0].Parent().SpanID().String() != parentSpan {
		t.Fatalf("spans %v, want one child of the metadata's traceparent", ended)
	}
	if got := attrs(ended[0])["sluice.intake"].AsString(); got != "rls" {
		t.Errorf("sluice.intake %q", got)
	}
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{"no exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"sampler alone", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := enabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("enabled %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUnknownProtocolIsRefused(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
	if _, err := fromEnv(context.Background(), func(k string) string { return env[k] }); err == nil {
		t.Error("http/json accepted")
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}
