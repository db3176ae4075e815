package rlqs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/tracing"
)

const tenantPolicy = "match: {domain: edge, descriptor: [{key: tenant}]}\nkey: '{descriptor:tenant}'\nlimits: [{name: r, tokenBucket: {capacity: 1000, refillRate: 1000, refillInterval: 1s}}]"

func usage(id map[string]string, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// exchange sends one report and returns the answer, or the stream's error.
func exchange(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, domain string, usages ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) (*rlqsv3.RateLimitQuotaResponse, error) {
	if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: usages}); err != nil {
		return nil, err
	}
	return s.Recv()
}

// actionOf names a bucket action: "allow", "deny" or "tokens N/M" (max_tokens/tokens_per_fill).
func actionOf(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	switch {
	case s.GetTokenBucket() != nil:
		return fmt.Sprintf("tokens %d/%d", s.GetTokenBucket().GetMaxTokens(), s.GetTokenBucket().GetTokensPerFill().GetValue())
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return "deny"
	}
	return "allow"
}

// Each bad input gets a clear, bounded answer, and a stream beside it
// keeps its assignments.
func TestBadInput(t *testing.T) {
	store := redisBackend(t, redistest.Start(t))
	p := startProcess(t, store, rlqs.Options{MaxBuckets: 50}, policytest.Compile(t, "ns", "quota", tenantPolicy))
	good := p.open(t)
	goodAnswer := func() string {
		t.Helper()
		resp, err := exchange(good, "edge", usage(map[string]string{"tenant": "good"}, 5, 0))
		if err != nil {
			t.Fatalf("the good stream: %v", err)
		}
		return actionOf(resp.GetBucketAction()[0])
	}
	if a := goodAnswer(); !strings.HasPrefix(a, "tokens") {
		t.Fatalf("the good stream's first assignment: %s, want a token bucket", a)
	}
	refused := []struct {
		name    string
		domain  string
		usages  []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		message string
	}{
		{"no domain", "", []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "a"}, 1, 0)}, "domain: must be set"},
		{"absurd allowed count", "edge", []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "a"}, 1<<63, 0)}, "bucket_quota_usages[0].num_requests_allowed: 9223372036854775808, more than 4294967296"},
		{"absurd denied count", "edge", []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "a"}, 0, 0), usage(map[string]string{"tenant": "b"}, 0, 1<<40)}, "bucket_quota_usages[1].num_requests_denied"},
		{"empty bucket id", "edge", []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil, 1, 0)}, "bucket_quota_usages[0].bucket_id.bucket: must have at least one entry"},
		{"an empty key", "edge", []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"": "x"}, 1, 0)}, `bucket_id.bucket[""]`},
		{"more buckets in one report than a stream holds", "edge", manyUsages("r", 51), "51 reports, more than the 50 buckets"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := exchange(p.open(t), tt.domain, tt.usages...)
			if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.message) {
				t.Errorf("answer: %v; want InvalidArgument saying %q", err, tt.message)
			}
			if a := goodAnswer(); !strings.HasPrefix(a, "tokens") {
				t.Errorf("the good stream after it: %s, want a token bucket", a)
			}
		})
	}

	t.Run("a bucket no policy matches is allowed", func(t *testing.T) {
		resp, err := exchange(p.open(t), "edge", usage(map[string]string{"route": "x"}, 3, 0), usage(map[string]string{"tenant": "a", "extra": "y"}, 3, 0))
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range resp.GetBucketAction() {
			if actionOf(a) != "allow" || a.GetQuotaAssignmentAction().GetAssignmentTimeToLive() == nil {
				t.Errorf("bucket %d: %s, want allow with a time to live", i, actionOf(a))
			}
		}
	})

	t.Run("a domain of another stream's", func(t *testing.T) {
		s := p.open(t)
		if _, err := exchange(s, "edge", usage(map[string]string{"tenant": "a"}, 1, 0)); err != nil {
			t.Fatal(err)
		}
		_, err := exchange(s, "other", usage(map[string]string{"tenant": "a"}, 1, 0))
		if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `domain: "other" differs from the stream's "edge"`) {
			t.Errorf("answer: %v", err)
		}
	})

	t.Run("an unbound domain is allowed", func(t *testing.T) {
		resp, err := exchange(p.open(t), "nobody", usage(map[string]string{"tenant": "a"}, 1, 0))
		if err != nil || actionOf(resp.GetBucketAction()[0]) != "allow" {
			t.Errorf("answer: %v %v", resp, err)
		}
	})

	t.Run("buckets past the cap", func(t *testing.T) {
		s := p.open(t)
		before := metricValue(t, p, "sluice_rlqs_buckets_over_cap_total")
		for i := range 3 {
			resp, err := exchange(s, "edge", manyUsages(fmt.Sprintf("c%d-", i), 20)...)
			if err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
			for j, a := range resp.GetBucketAction() {
				want := "tokens"
				if i*20+j >= 50 {
					want = "allow" // the policy fails open
				}
				if got := actionOf(a); !strings.HasPrefix(got, want) {
					t.Errorf("report %d, bucket %d: %s, want %s", i, j, got, want)
				}
			}
		}
		if over := metricValue(t, p, "sluice_rlqs_buckets_over_cap_total") - before; over != 10 {
			t.Errorf("buckets over the cap counted: %v, want 10", over)
		}
		if a := goodAnswer(); !strings.HasPrefix(a, "tokens") {
			t.Errorf("the good stream: %s", a)
		}
	})
}

func manyUsages(prefix string, n int) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	out := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, n)
	for i := range out {
		out[i] = usage(map[string]string{"tenant": fmt.Sprintf("%s%d", prefix, i)}, 1, 0)
	}
	return out
}

// A stream that never reports is ended after the idle timeout.
func TestSilentStreamEnds(t *testing.T) {
	store := redisBackend(t, redistest.Start(t))
	p := startProcess(t, store, rlqs.Options{IdleTimeout: 300 * time.Millisecond}, policytest.Compile(t, "ns", "quota", tenantPolicy))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(p.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), "no usage report for 300ms") {
		t.Errorf("a silent stream: %v, want DeadlineExceeded", err)
	}
}

// With Redis away, each bucket's policy's failureMode answers as a
// blanket rule, and what was admitted meanwhile is charged once it is
// back, when token buckets resume.
func TestRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server")
	}
	srv := redistest.Start(t)
	store := redisBackend(t, srv)
	p := startProcess(t, store, rlqs.Options{},
		policytest.Compile(t, "ns", "open", "failureMode: Open\nmatch: {domain: edge, descriptor: [{key: open}]}\nlimits: [{name: r, fixedWindow: {limit: 100, window: 1h}}]"),
		policytest.Compile(t, "ns", "closed", "failureMode: Closed\nmatch: {domain: edge, descriptor: [{key: closed}]}\nlimits: [{name: r, fixedWindow: {limit: 100, window: 1h}}]"))
	s := p.open(t)
	open, closed := map[string]string{"open": "x"}, map[string]string{"closed": "x"}
	answers := func(openAllowed uint64) (string, string) {
		t.Helper()
		resp, err := exchange(s, "edge", usage(open, openAllowed, 0), usage(closed, 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		return actionOf(resp.GetBucketAction()[0]), actionOf(resp.GetBucketAction()[1])
	}
	if o, c := answers(1); !strings.HasPrefix(o, "tokens") || !strings.HasPrefix(c, "tokens") {
		t.Fatalf("before the fault: %s %s", o, c)
	}
	srv.Kill()
	if o, c := answers(0); o != "allow" || c != "deny" {
		t.Errorf("Redis down: open %s, closed %s; want allow, deny", o, c)
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// 90 admitted under allow all while Redis was away: charged now,
		// so that little of the hour's 100 is left to assign.
		o, c := answers(90)
		if strings.HasPrefix(o, "tokens") || o == "deny" {
			if !strings.HasPrefix(c, "tokens") {
				t.Errorf("after the restart: closed %s", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("assignments did not resume within 5s of the restart")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := p.checker.Buckets().Inspect(context.Background(), "ns", "open", "open=x")
	if err != nil {
		t.Fatal(err)
	}
	if left := out.Limits[0].Remaining; left >= 10 {
		t.Errorf("after the restart %d of 100 are left: the 90 admitted under allow all were not charged", left)
	}
}

// metricValue is the value of the process's metric name (the sum of its
// series).
func metricValue(t testing.TB, p *process, name string) float64 {
	t.Helper()
	families, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

// A bucket without a request for AbandonAfter is abandoned (Envoy keeps
// and reports every bucket it ever made until told), its state
// forgotten; reported again, it is a new bucket.
func TestIdleBucketAbandoned(t *testing.T) {
	p := startProcess(t, redisBackend(t, redistest.Start(t)), rlqs.Options{AbandonAfter: 300 * time.Millisecond}, policytest.Compile(t, "ns", "quota", tenantPolicy))
	s := p.open(t)
	id := map[string]string{"tenant": "acme"}
	resp, err := exchange(s, "edge", usage(id, 5, 0))
	if err != nil || !strings.HasPrefix(actionOf(resp.GetBucketAction()[0]), "tokens") {
		t.Fatalf("first report: %v %v", resp, err)
	}
	if v := metricValue(t, p, "sluice_rlqs_buckets"); v != 1 {
		t.Fatalf("buckets held: %v, want 1", v)
	}
	time.Sleep(400 * time.Millisecond)
	resp, err = exchange(s, "edge", usage(id, 0, 0))
	if err != nil || resp.GetBucketAction()[0].GetAbandonAction() == nil {
		t.Fatalf("a report without requests after the idle time: %v %v, want abandon", resp, err)
	}
	if v := metricValue(t, p, "sluice_rlqs_buckets"); v != 0 {
		t.Errorf("buckets held after the abandon: %v, want 0", v)
	}
	resp, err = exchange(s, "edge", usage(id, 1, 0))
	if err != nil || !strings.HasPrefix(actionOf(resp.GetBucketAction()[0]), "tokens") {
		t.Fatalf("the bucket again: %v %v", resp, err)
	}
}

// Each reservation is traced as a check of the rlqs intake, a child of
// the stream's traceparent.
func TestReservationsTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), tracing.SystemRedis)
	p := startProcess(t, redisBackend(t, redistest.Start(t)), rlqs.Options{Tracer: tr}, policytest.Compile(t, "ns", "quota", tenantPolicy))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(p.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(s, "edge", usage(map[string]string{"tenant": "acme"}, 3, 0)); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, sp := range rec.Ended() {
		if sp.Name() != tracing.CheckSpan {
			continue
		}
		found = true
		if sp.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("the reservation's span is not the stream's child: parent %v", sp.Parent())
		}
		attrs := map[string]string{}
		for _, a := range sp.Attributes() {
			attrs[string(a.Key)] = a.Value.AsString()
		}
		if attrs["sluice.intake"] != "rlqs" || attrs["sluice.policy"] != "ns/quota" || attrs["sluice.decision"] != "allowed" {
			t.Errorf("the reservation's span: %v", attrs)
		}
	}
	if !found {
		t.Error("no span of the reservation")
	}
}
