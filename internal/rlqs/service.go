// Package rlqs is Envoy's rate limit quota service
// (envoy.service.rate_limit_quota.v3): Envoy sorts requests into buckets
// by its own matchers, enforces each bucket's assignment locally, and
// reports its usage every reporting interval; the service turns the
// fleet's usage into each Envoy's next assignment, so a fleet-wide limit
// costs no call per request.
//
// A bucket id is matched to a namespace's descriptor policies as a rate
// limit service descriptor is (policy.NewBucket: entries by key, whatever
// their order) and counts in the same buckets of the store. Each Envoy's
// assignment is reserved in the store ahead of its use and settled by its
// next report (assign.go); docs/concepts/quota-service.md states the bound.
package rlqs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Bounds of one stream.
const (
	// DefaultMaxBuckets caps the buckets one stream holds state for:
	// about 1 KiB each, 10 MiB a stream. A new bucket past it is answered
	// by its policies' failure mode, without state, and counted
	// (sluice_rlqs_buckets_over_cap_total).
	DefaultMaxBuckets = 10000
	// DefaultIdleTimeout ends a stream that sends no report this long,
	// the gRPC listener's idle timeout: Envoy reports every reporting
	// interval while it has buckets, and opens a stream again when it
	// has one.
	DefaultIdleTimeout = 5 * time.Minute
)

// Options configure a Service.
type Options struct {
	Checker *check.Checker
	// Domains binds each domain to the namespace whose descriptor
	// policies answer it (--rls-domain); buckets of other domains are
	// allowed.
	Domains map[string]string
	// MaxBuckets, IdleTimeout and AbandonAfter override the defaults
	// (DefaultMaxBuckets, DefaultIdleTimeout, DefaultAbandonAfter) when
	// positive.
	MaxBuckets   int
	IdleTimeout  time.Duration
	AbandonAfter time.Duration
	// Tracer traces each reservation, a child of the stream's traceparent
	// (nil: off).
	Tracer     *tracing.Tracer
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Service serves StreamRateLimitQuotas.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	opts    Options
	metrics *metrics
	shares  *shares
	streams atomic.Uint64

	unboundMu sync.Mutex
	unbound   map[string]bool
}

// New builds the service.
func New(o Options) (*Service, error) {
	if o.Checker == nil {
		return nil, errors.New("rlqs: a Checker is required")
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.AbandonAfter <= 0 {
		o.AbandonAfter = DefaultAbandonAfter
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{opts: o, metrics: newMetrics(o.Registerer), shares: newShares(), unbound: map[string]bool{}}, nil
}

// Register registers the service on srv.
func (s *Service) Register(srv grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, s)
}

// Shares lists what each Envoy holds of the bucket keyValue of policy
// namespace/name, with its last report (the admin API's inspect).
func (s *Service) Shares(namespace, name, keyValue string) []Share {
	return s.shares.of(namespace, name, keyValue)
}

// StreamRateLimitQuotas serves one Envoy: each report is answered with
// the assignments of the buckets it names. The stream ends when the
// client ends it, on a report that is not valid (InvalidArgument naming
// the field), or after IdleTimeout without a report.
func (s *Service) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := stream.Context()
	st := s.open(ctx)
	defer s.close(st)
	reports, errc := receive(ctx, stream)
	idle := time.NewTimer(s.opts.IdleTimeout)
	defer idle.Stop()
	tick := time.NewTicker(topUpEvery)
	defer tick.Stop()
	for {
		select {
		case m := <-reports:
			idle.Reset(s.opts.IdleTimeout)
			resp, err := st.handle(ctx, m)
			if err != nil {
				return err
			}
			if len(resp.BucketAction) > 0 {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-tick.C:
			if resp := st.topUp(ctx); len(resp.BucketAction) > 0 {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		case <-idle.C:
			return grpcstatus.Errorf(codes.DeadlineExceeded, "no usage report for %s: the stream is closed; open another to report again", s.opts.IdleTimeout)
		}
	}
}

// receive reads the stream's reports until it fails or ctx ends (when
// the handler returns).
func receive(ctx context.Context, stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) (<-chan *rlqsv3.RateLimitQuotaUsageReports, <-chan error) {
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return reports, errc
}

func (s *Service) open(ctx context.Context) *stream {
	name := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		name = p.Addr.String()
		if host, _, err := net.SplitHostPort(name); err == nil {
			name = host
		}
	}
	s.metrics.streams.Inc()
	return &stream{s: s, envoy: name + "#" + strconv.FormatUint(s.streams.Add(1), 10), buckets: map[string]*bucket{}}
}

// close forgets st's buckets. What it reserved and did not report stays
// charged: it may have been admitted.
func (s *Service) close(st *stream) {
	s.metrics.streams.Dec()
	s.metrics.buckets.Sub(float64(len(st.buckets)))
	for _, b := range st.buckets {
		s.shares.drop(st, b.refs)
	}
}

// reportUnbound logs a domain bound to no namespace, once per domain.
func (s *Service) reportUnbound(domain string) {
	s.unboundMu.Lock()
	defer s.unboundMu.Unlock()
	if s.unbound[domain] || len(s.unbound) >= 64 {
		return
	}
	s.unbound[domain] = true
	s.opts.Logger.Warn("quota buckets of a domain no namespace is bound to are allowed; bind it with --rls-domain DOMAIN=NAMESPACE",
		"domain", intake.Excerpt(domain))
}
