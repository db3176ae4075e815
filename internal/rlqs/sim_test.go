package rlqs_test

import (
	"context"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// process is one check process serving the quota service over a store.
type process struct {
	svc     *rlqs.Service
	checker *check.Checker
	reg     *prometheus.Registry
	conn    *grpc.ClientConn
}

// startProcess serves the quota service of a checker over store (its
// calls given a second: a loaded machine must not turn them into failure
// modes) with
// policies, domain "edge" bound to namespace "ns", on a loopback port.
func startProcess(t testing.TB, store ratelimit.Backend, o rlqs.Options, policies ...*policy.Policy) *process {
	t.Helper()
	reg := prometheus.NewRegistry()
	co := check.Options{Backend: store, Timeout: time.Second, BreakerCooldown: 200 * time.Millisecond, Metrics: check.NewMetrics(reg)}
	o.Checker = checktest.New(t, co, policies...)
	o.Registerer = reg
	if o.Domains == nil {
		o.Domains = map[string]string{"edge": "ns"}
	}
	svc, err := rlqs.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return &process{svc: svc, checker: o.Checker, reg: reg, conn: conn}
}

func (p *process) open(t testing.TB) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(p.conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.CloseSend() })
	return s
}

// held is an assignment an Envoy received.
type held struct {
	at     time.Time
	action string // allow, deny, tokens
	tokens int64
}

// envoy simulates Envoy 1.40's rate_limit_quota filter for one bucket,
// as its source and the real binary behave: the first request of a
// bucket is allowed (no_assignment_behavior allow) and reported at once;
// answers are applied as they arrive, pushed or not; a token bucket
// starts full, refills continuously at tokens_per_fill per whole second
// of fill_interval, is kept when an assignment repeats it and keeps its
// tokens when only its numbers change; an expired assignment denies
// (expired_assignment_behavior deny).
type envoy struct {
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	id     map[string]string

	// state guards what deciding and applying share.
	state   sync.Mutex
	started bool
	action  string
	tb      *typev3.TokenBucket
	tokens  float64
	filled  time.Time
	expires time.Time

	allowed, denied uint64
	lastReport      time.Time
	interval        time.Duration // between reports (run's)

	mu       sync.Mutex
	admitted []time.Time
	holds    []held
}

// newEnvoy starts an Envoy on stream, applying every answer it receives.
func newEnvoy(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, id map[string]string) *envoy {
	e := &envoy{stream: stream, id: id}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			for _, a := range resp.GetBucketAction() {
				e.apply(a, time.Now())
			}
		}
	}()
	return e
}

// request decides one request at now.
func (e *envoy) request(t testing.TB, now time.Time) bool {
	e.state.Lock()
	first := !e.started
	e.started = true
	ok := first || e.decide(now)
	if ok {
		e.allowed++
	} else {
		e.denied++
	}
	e.state.Unlock()
	if ok {
		e.record(now)
	}
	if first {
		e.report(t, now)
	}
	return ok
}

func (e *envoy) decide(now time.Time) bool {
	if e.action == "" {
		return true
	}
	if now.After(e.expires) {
		return false
	}
	switch e.action {
	case "allow":
		return true
	case "deny":
		return false
	}
	e.refill(now)
	if e.tokens >= 1 {
		e.tokens--
		return true
	}
	return false
}

// refill adds the token bucket's refill up to now.
func (e *envoy) refill(now time.Time) {
	rate := float64(e.tb.GetTokensPerFill().GetValue()) / math.Floor(e.tb.GetFillInterval().AsDuration().Seconds())
	e.tokens = min(float64(e.tb.GetMaxTokens()), e.tokens+rate*now.Sub(e.filled).Seconds())
	e.filled = now
}

func (e *envoy) record(now time.Time) {
	e.mu.Lock()
	e.admitted = append(e.admitted, now)
	e.mu.Unlock()
}

// report sends the bucket's usage since the last report.
func (e *envoy) report(t testing.TB, now time.Time) {
	e.state.Lock()
	elapsed := time.Duration(0)
	if !e.lastReport.IsZero() {
		elapsed = now.Sub(e.lastReport).Truncate(time.Second)
	}
	e.lastReport = now
	usage := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: e.id}, TimeElapsed: durationpb.New(elapsed),
		NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied}
	e.allowed, e.denied = 0, 0
	e.state.Unlock()
	if err := e.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage}}); err != nil {
		t.Errorf("send: %v", err)
	}
}

func (e *envoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	e.state.Lock()
	defer e.state.Unlock()
	qa := a.GetQuotaAssignmentAction()
	e.expires = now.Add(qa.GetAssignmentTimeToLive().AsDuration())
	h := held{at: now}
	switch s := qa.GetRateLimitStrategy(); {
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		switch {
		case e.tb == nil || e.action != "tokens":
			e.tokens, e.filled = float64(tb.GetMaxTokens()), now // a fresh bucket starts full
		default:
			e.refill(now) // the old rate up to now; the tokens are kept
			e.tokens = min(e.tokens, float64(tb.GetMaxTokens()))
		}
		e.tb = tb
		e.action, h.action, h.tokens = "tokens", "tokens", int64(tb.GetMaxTokens())+int64(tb.GetTokensPerFill().GetValue())*e.interval.Milliseconds()/1000
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		e.action, h.action = "deny", "deny"
	default:
		e.action, h.action = "allow", "allow"
	}
	e.mu.Lock()
	e.holds = append(e.holds, h)
	e.mu.Unlock()
}

// run sends requests at rate(elapsed) per second until end, reporting
// every interval.
func (e *envoy) run(t testing.TB, start, end time.Time, interval time.Duration, rate func(time.Duration) float64) {
	const tick = 5 * time.Millisecond
	e.state.Lock()
	e.interval = interval
	e.state.Unlock()
	acc := 0.0
	last := start
	for now := time.Now(); now.Before(end); now = time.Now() {
		acc += rate(now.Sub(start)) * now.Sub(last).Seconds()
		last = now
		for ; acc >= 1; acc-- {
			e.request(t, now)
		}
		e.state.Lock()
		due := e.started && now.Sub(e.lastReport) >= interval
		e.state.Unlock()
		if due {
			e.report(t, now)
		}
		time.Sleep(tick)
	}
}

// largest is the largest token bucket e held during [from, to): received
// in it, or in force at its start.
func (e *envoy) largest(from, to time.Time) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var g int64
	for i, h := range e.holds {
		inForce := h.at.Before(from) && (i+1 == len(e.holds) || !e.holds[i+1].at.Before(from))
		if (inForce || (!h.at.Before(from) && h.at.Before(to))) && h.tokens > g {
			g = h.tokens
		}
	}
	return g
}

func (e *envoy) admittedIn(from, to time.Time) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n int64
	for _, at := range e.admitted {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func rlqsOptions() rlqs.Options { return rlqs.Options{} }

// redisBackend is the Redis store over srv, its library loaded ahead of
// the checks' deadlines.
func redisBackend(t testing.TB, srv *redistest.Server) ratelimit.Backend {
	t.Helper()
	s := storetest.Redis(t, srv.Addr())
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s.Backend()
}
