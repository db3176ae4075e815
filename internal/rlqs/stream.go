package rlqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Bounds of one report.
const (
	// MaxBucketEntries bounds a bucket id's entries, as a rate limit
	// service request's descriptors are bounded: Envoy's bucket id
	// builders name a handful.
	MaxBucketEntries = check.MaxParts
	// MaxEntryBytes bounds one entry's key and value.
	MaxEntryBytes = 1024
	// MaxReportCount bounds the requests of one report's counts: over 4
	// billion in one reporting interval is no Envoy's traffic.
	MaxReportCount = 1 << 32
)

// stream is one Envoy's stream: its domain (from the first report) and
// the buckets it reported, by the encoded bucket id.
type stream struct {
	s         *Service
	envoy     string
	domain    string
	namespace string
	bound     bool
	started   bool
	buckets   map[string]*bucket
	overCap   bool // logged once
}

// handle answers one report: the assignment of each bucket it names.
func (st *stream) handle(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	if err := st.readDomain(m.GetDomain()); err != nil {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if len(m.GetBucketQuotaUsages()) > st.s.opts.MaxBuckets {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "bucket_quota_usages: %d reports, more than the %d buckets a stream holds", len(m.GetBucketQuotaUsages()), st.s.opts.MaxBuckets)
	}
	for i, u := range m.GetBucketQuotaUsages() {
		if err := validateUsage(u); err != nil {
			return nil, grpcstatus.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].%v", i, err)
		}
	}
	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, 0, len(m.GetBucketQuotaUsages()))}
	for _, u := range m.GetBucketQuotaUsages() {
		resp.BucketAction = append(resp.BucketAction, st.answer(ctx, u))
	}
	return resp, nil
}

// readDomain takes the domain of the stream's first report; later ones
// may repeat it or leave it empty.
func (st *stream) readDomain(domain string) error {
	if !st.started {
		if domain == "" {
			return fmt.Errorf("domain: must be set in a stream's first report")
		}
		st.started, st.domain = true, domain
		st.namespace, st.bound = st.s.opts.Domains[domain]
		if !st.bound {
			st.s.reportUnbound(domain)
		}
		return nil
	}
	if domain != "" && domain != st.domain {
		return fmt.Errorf("domain: %q differs from the stream's %q: open another stream for another domain", domain, st.domain)
	}
	return nil
}

// validateUsage checks one bucket's report, naming the field at fault.
func validateUsage(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	id := u.GetBucketId().GetBucket()
	switch {
	case len(id) == 0:
		return fmt.Errorf("bucket_id.bucket: must have at least one entry")
	case len(id) > MaxBucketEntries:
		return fmt.Errorf("bucket_id.bucket: %d entries, more than %d", len(id), MaxBucketEntries)
	case u.GetNumRequestsAllowed() > MaxReportCount:
		return fmt.Errorf("num_requests_allowed: %d, more than %d requests in one report", u.GetNumRequestsAllowed(), uint64(MaxReportCount))
	case u.GetNumRequestsDenied() > MaxReportCount:
		return fmt.Errorf("num_requests_denied: %d, more than %d requests in one report", u.GetNumRequestsDenied(), uint64(MaxReportCount))
	case u.GetTimeElapsed().AsDuration() < 0:
		return fmt.Errorf("time_elapsed: %s, must not be negative", u.GetTimeElapsed().AsDuration())
	}
	for k, v := range id {
		if k == "" || len(k) > MaxEntryBytes || len(v) > MaxEntryBytes {
			return fmt.Errorf("bucket_id.bucket[%q]: a key of 1 to %d bytes with a value of at most %d", excerpt(k), MaxEntryBytes, MaxEntryBytes)
		}
	}
	return nil
}

func excerpt(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// answer settles u's bucket and assigns it anew.
func (st *stream) answer(ctx context.Context, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	m := st.s.metrics
	if !st.bound {
		m.reports.WithLabelValues(reportUnbound).Inc()
		return st.s.blanket(u.GetBucketId(), actionAllowAll, noPolicyTTL)
	}
	key := encodeID(u.GetBucketId().GetBucket())
	b := st.buckets[key]
	if b == nil {
		req := policy.NewBucket(st.domain, u.GetBucketId().GetBucket())
		if len(st.buckets) >= st.s.opts.MaxBuckets {
			return st.overTheCap(u, req)
		}
		b = &bucket{id: u.GetBucketId(), req: req, key: key, used: st.s.opts.Now()}
		st.buckets[key] = b
		m.buckets.Inc()
	}
	return st.s.assign(ctx, st, b, u)
}

// overTheCap answers a new bucket past the stream's cap by its policies'
// failure mode, keeping nothing of it.
func (st *stream) overTheCap(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, req *policy.Request) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	s := st.s
	s.metrics.overCap.Inc()
	s.metrics.reports.WithLabelValues(reportOverCap).Inc()
	if !st.overCap {
		st.overCap = true
		s.opts.Logger.Warn("a quota stream reports more buckets than it may hold; each new one is answered by its policies' failure mode",
			"envoy", st.envoy, "cap", s.opts.MaxBuckets)
	}
	servable, unservable := s.matching(st.namespace, req)
	action := failureAction(servable, unservable)
	if len(servable)+len(unservable) == 0 {
		action = actionAllowAll
	}
	return s.blanket(u.GetBucketId(), action, noPolicyTTL)
}

// encodeID encodes a bucket id injectively, its entries by key.
func encodeID(id map[string]string) string {
	r := policy.NewBucket("", id)
	var b strings.Builder
	for _, e := range r.Descriptor {
		b.WriteString(strconv.Itoa(len(e.Key)))
		b.WriteByte(':')
		b.WriteString(e.Key)
		b.WriteString(strconv.Itoa(len(e.Value)))
		b.WriteByte(':')
		b.WriteString(e.Value)
	}
	return b.String()
}

// abandon forgets b, and tells Envoy to: it makes the bucket anew at its
// next request, which reports it at once.
func (st *stream) abandon(b *bucket) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	st.s.shares.drop(st, b.refs)
	delete(st.buckets, b.key)
	st.s.metrics.buckets.Dec()
	st.s.metrics.assignments.WithLabelValues(actionAbandon).Inc()
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}
