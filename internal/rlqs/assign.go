package rlqs

import (
	"context"
	"math"
	"slices"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// How a bucket's assignment is made, each report (docs/concepts/quota-service.md):
//
//  1. settle: the units reserved for the Envoy at its last report are
//     squared with what it reports it admitted: what it admitted beyond
//     them is charged whatever the limits say (it was admitted), what it
//     left unused is given back while the window it was taken from lasts;
//  2. size: its share of the room the limits have left, from its demand
//     (admitted and denied over the interval) against the demand of the
//     other Envoys of this process on the same bucket;
//  3. reserve: the share is taken from the limits, all or nothing, before
//     Envoy uses it, and sent as a token bucket of that many tokens per
//     reporting interval.
//
// The bucket's limits in the store are the fleet's: each check process
// reserves from them, so no Envoy is given what another was.

// Assignment timing.
const (
	// DefaultInterval is a bucket's reporting interval until the time
	// between two of its reports tells it: Envoy 1.40 reports every 5 s,
	// whatever its reporting_interval says.
	DefaultInterval = 5 * time.Second
	minInterval     = time.Second
	maxInterval     = time.Minute
	// ttlIntervals is an assignment's life in reporting intervals, in
	// whole seconds as Envoy reads it: one late or lost report does not
	// expire it.
	ttlIntervals = 3
	// DefaultAbandonAfter is how long a bucket may go without a request before
	// it is abandoned: Envoy keeps and reports every bucket it ever made
	// until told to abandon it, and makes it anew at its next request.
	DefaultAbandonAfter = time.Minute
	// noPolicyTTL is the life of the assignment of a bucket no policy
	// holds (allow all): Envoy's next report asks again anyway.
	noPolicyTTL = time.Minute
	// roomShareFloor: an Envoy asks at least this part of the room left
	// (1/16), whatever its demand.
	roomShareFloor = 16
	// growth is a share's headroom over the demand of the last interval,
	// so that growing traffic is not held at what it was.
	growth = 2
)

// bucket is one stream's state of one bucket id.
type bucket struct {
	id  *rlqsv3.BucketId
	req *policy.Request
	// refs are the policy buckets it counts in (its shares).
	refs []bucketRef
	// held is what was taken from the limits for it since its last
	// report, oldest first: the report's assignment, then its top-ups,
	// each from the window current when it was taken. owed is what
	// settling still has to charge (positive) or give back (negative),
	// carried while the store cannot answer.
	held []reservation
	owed int64
	// admitted is what the Envoy let through and the limits that never
	// deny (Shadow, Soft: no part of the reservations) are still to be
	// charged, carried while the store cannot answer.
	admitted int64
	interval time.Duration
	measured bool // interval is measured, not DefaultInterval
	reported time.Time
	// key is its encoded id in the stream; used, its last request's report.
	key  string
	used time.Time
	// share is its last assignment; hungry, that its demand exceeded it;
	// starved, that it is denied all for want of room.
	share           Share
	hungry, starved bool
}

// assign settles u's report of b and answers b's next assignment.
func (s *Service) assign(ctx context.Context, st *stream, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	now := s.opts.Now()
	elapsed := b.observe(u.GetTimeElapsed().AsDuration(), now)
	// The policy buckets it counts in are found again (policies change).
	s.shares.drop(st, b.refs)
	b.refs = b.refs[:0]
	servable, unservable := s.matching(st.namespace, b.req)
	for _, p := range unservable {
		s.metrics.unservable.WithLabelValues(p.Namespace, p.Name).Inc()
	}
	if u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() > 0 {
		b.used = now
	}
	if len(servable)+len(unservable) == 0 {
		s.metrics.reports.WithLabelValues(reportNoPolicy).Inc()
		b.held, b.owed, b.admitted = b.held[:0], 0, 0
		if now.Sub(b.used) >= s.opts.AbandonAfter {
			return st.abandon(b)
		}
		return s.blanket(b.id, actionAllowAll, noPolicyTTL)
	}
	b.owe(int64(u.GetNumRequestsAllowed()), now)   //nolint:gosec // at most MaxReportCount (validateUsage)
	b.admitted += int64(u.GetNumRequestsAllowed()) //nolint:gosec // at most MaxReportCount (validateUsage)
	b.starved = false
	sh := Share{Envoy: st.envoy, Interval: b.interval, Reported: now, Allowed: u.GetNumRequestsAllowed(), Denied: u.GetNumRequestsDenied(),
		Want: b.want(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied(), elapsed)}
	action := failureAction(servable, unservable)
	if len(servable) > 0 {
		action = s.serve(ctx, st, b, servable, &sh)
	} else {
		b.owed, b.admitted = 0, 0 // nothing of it is counted
		s.metrics.reports.WithLabelValues(reportCharged).Inc()
	}
	if failureAction(nil, unservable) == actionDenyAll {
		action, sh.Tokens, sh.Burst = actionDenyAll, 0, 0
	}
	if action == actionAbandon {
		return st.abandon(b)
	}
	sh.Action = action
	s.setShares(st, b, sh)
	b.share = sh
	// Denied with less than it asked, or for want of room: the ticks top
	// it up (topup.go).
	b.hungry = b.starved || action == actionTokenBucket && u.GetNumRequestsDenied() > 0 && sh.Reserved < sh.Want
	ttl := time.Duration(ttlIntervals*b.seconds()) * time.Second
	if action == actionTokenBucket {
		return s.tokenBucket(b.id, sh, ttl)
	}
	return s.blanket(b.id, action, ttl)
}

// serve settles and reserves b's share of its servable policies' limits
// into sh: a token bucket, deny all when too little room is left, or the
// failure mode's blanket rule when the store cannot answer.
func (s *Service) serve(ctx context.Context, st *stream, b *bucket, servable []*policy.Policy, sh *Share) string {
	out, err := s.settle(ctx, st.namespace, b, servable)
	if err != nil || out.Degraded {
		s.metrics.reports.WithLabelValues(reportDeferred).Inc()
		s.logStoreError(err, out)
		return failureAction(servable, nil)
	}
	s.metrics.reports.WithLabelValues(reportCharged).Inc()
	b.refs = refsOf(out, b.refs)
	if s.opts.Now().Sub(b.used) >= s.opts.AbandonAfter {
		return actionAbandon // settled: nothing of it is held
	}
	left, enforced, _ := room(out)
	if !enforced {
		return actionAllowAll // shadow policies only
	}
	// Where room is plenty, an Envoy quiet so far is not held to its
	// history: its next burst finds a share without waiting a report.
	sh.Want = max(sh.Want, left/roomShareFloor)
	var wants, reserved int64
	for _, ref := range b.refs {
		w, r := s.shares.others(ref, st)
		wants, reserved = max(wants, w), max(reserved, r)
	}
	secs := b.seconds()
	tb, out, err := s.reserve(ctx, st.namespace, b, servable, fairShare(sh.Want, wants, left, reserved), secs)
	if err != nil || (out != nil && out.Degraded) {
		s.logStoreError(err, out)
		return failureAction(servable, nil)
	}
	if tb.reserved == 0 {
		b.starved = true // the room is taken: the ticks may find it refilled
		return actionDenyAll
	}
	b.hold(tb.reserved, out, s.opts.Now())
	sh.Reserved, sh.Burst, sh.Tokens = tb.reserved, tb.burst, tb.rate
	return actionTokenBucket
}

// fairShare is an Envoy's share of one interval's room: what it wants,
// or when the wants of the bucket's Envoys in this process exceed the
// room (what is left and what the others hold), the room in proportion
// to its want; never more than is left.
func fairShare(want, othersWant, left, othersHold int64) int64 {
	if total := left + othersHold; want+othersWant > total {
		want = int64(float64(total) * float64(want) / float64(want+othersWant))
	}
	return max(min(want, left), 0)
}

// bucketShape is a token bucket Envoy enforces: it starts with burst
// tokens (the most it holds) and refills rate a second, so that in one
// reporting interval of secs it admits at most reserved.
type bucketShape struct{ burst, rate, reserved int64 }

// shape fits a token bucket within share units an interval of secs: a
// third of it (at least one token) as the burst, the rest as a rate of
// whole tokens a second, at least one (Envoy's least). Zero when it
// does not fit.
func shape(share, secs int64) bucketShape {
	if share < 1+secs {
		return bucketShape{}
	}
	burst := max(1, min(share/3, share-secs))
	rate := min((share-burst)/secs, math.MaxUint32)
	burst = min(burst, math.MaxUint32)
	return bucketShape{burst: burst, rate: rate, reserved: burst + rate*secs}
}

// settle squares b's reservation with its report (owed): charges or
// gives back, or reads the limits when nothing is owed. The outcome has
// the limits' figures after it.
func (s *Service) settle(ctx context.Context, ns string, b *bucket, servable []*policy.Policy) (*check.Outcome, error) {
	in := check.Input{Namespace: ns, Parts: []check.Part{{Request: b.req, Policies: servable, CostSet: true, Limits: check.EnforcedLimits}}}
	part := &in.Parts[0]
	switch {
	case b.owed > 0:
		part.Cost, part.Admitted = b.owed, true
	case b.owed < 0:
		part.Cost, in.Action = -b.owed, ratelimit.Refund
	default:
		in.Action = ratelimit.DryRun
	}
	out, err := s.opts.Checker.Check(ctx, in)
	if err == nil && !out.Degraded {
		b.owed = 0
	}
	s.chargeUnenforced(ctx, ns, b, servable)
	return out, err
}

// chargeUnenforced charges the limits that never deny (their mode Shadow
// or Soft), which take no part in the reservations (they shape no
// assignment), what b's Envoy let through since they were last charged,
// over the limit if need be: they count exactly what was admitted.
func (s *Service) chargeUnenforced(ctx context.Context, ns string, b *bucket, servable []*policy.Policy) {
	if b.admitted == 0 || !slices.ContainsFunc(servable, hasUnenforced) {
		b.admitted = 0
		return
	}
	in := check.Input{Namespace: ns, Parts: []check.Part{{Request: b.req, Policies: servable, Cost: b.admitted, CostSet: true, Admitted: true, Limits: check.UnenforcedLimits}}}
	if out, err := s.opts.Checker.Check(ctx, in); err == nil && !out.Degraded {
		b.admitted = 0
	}
}

// hasUnenforced reports whether a limit of p never denies.
func hasUnenforced(p *policy.Policy) bool {
	return slices.ContainsFunc(p.Limits, func(l policy.Limit) bool { return !l.Enforced() })
}

// reserve takes the token bucket that fits share from the servable
// policies' limits, all or nothing; when another took part of the room
// first, it takes what is left, once. It returns the bucket taken (zero:
// none) and the outcome with the figures.
func (s *Service) reserve(ctx context.Context, ns string, b *bucket, servable []*policy.Policy, share, secs int64) (bucketShape, *check.Outcome, error) {
	var out *check.Outcome
	for attempt := 0; attempt < 2; attempt++ {
		tb := shape(share, secs)
		if tb.reserved == 0 {
			break
		}
		spanCtx, span := s.opts.Tracer.StartGRPC(ctx, tracing.IntakeRLQS, ns)
		var err error
		out, err = s.opts.Checker.Check(spanCtx, check.Input{Namespace: ns, Parts: []check.Part{{Request: b.req, Policies: servable, Cost: tb.reserved, CostSet: true, Limits: check.EnforcedLimits}}})
		span.End(out, err)
		if err != nil || out.Degraded || out.Allowed {
			return tb, out, err
		}
		left, _, _ := room(out)
		share = min(tb.reserved-1, left)
	}
	return bucketShape{}, out, nil
}

// room is the least remaining of the enforced limits in out, and the
// least time until one of them is untouched again (the window a
// reservation is taken from); enforced is false when no limit enforces.
// A limit that never denies (its mode Shadow or Soft, a shadow policy's)
// shapes nothing: the quota filter cannot flag a request to its
// upstream, so a Soft limit served here is a Shadow one (it is charged
// what was admitted: chargeUnenforced).
func room(out *check.Outcome) (left int64, enforced bool, reset time.Duration) {
	left, reset = math.MaxInt64, time.Duration(math.MaxInt64)
	for i := range out.Limits {
		lr := &out.Limits[i]
		if !lr.Limit.Enforced() {
			continue
		}
		enforced = true
		left, reset = min(left, max(lr.Remaining, 0)), min(reset, lr.Reset)
	}
	return left, enforced, reset
}

// refsOf appends the policy buckets of out's policies to dst.
func refsOf(out *check.Outcome, dst []bucketRef) []bucketRef {
	for _, pr := range out.Policies {
		dst = append(dst, bucketRef{pr.Policy.Namespace, pr.Policy.Name, pr.KeyValue})
	}
	return dst
}

// matching are the namespace's policies that match req, apart by whether
// the quota service can serve them. A `when` that fails matches, as in
// a check.
func (s *Service) matching(ns string, req *policy.Request) (servable, unservable []*policy.Policy) {
	var e policy.Eval
	e.Reset(req)
	for _, p := range s.opts.Checker.Policies().AppendCandidates(nil, ns, req) {
		if ok, err := e.Match(p); !ok && err == nil {
			continue
		}
		if p.Unservable() != "" {
			unservable = append(unservable, p)
		} else {
			servable = append(servable, p)
		}
	}
	return servable, unservable
}

// failureAction is the blanket rule of policies the store cannot answer
// for: deny all when an enforced one fails closed, else allow all.
func failureAction(servable, unservable []*policy.Policy) string {
	for _, ps := range [][]*policy.Policy{servable, unservable} {
		for _, p := range ps {
			if p.FailClosed && !p.Shadow {
				return actionDenyAll
			}
		}
	}
	return actionAllowAll
}

// observe records a report at now and returns the time it covers, by
// this process's clock once it has one report (Envoy's time_elapsed is
// in whole seconds, truncated); the bucket's interval follows the
// reports.
func (b *bucket) observe(elapsed time.Duration, now time.Time) time.Duration {
	if !b.reported.IsZero() {
		elapsed = now.Sub(b.reported)
	}
	if elapsed >= minInterval && elapsed <= maxInterval {
		if b.measured {
			b.interval = (b.interval + elapsed) / 2
		} else {
			b.interval, b.measured = elapsed, true
		}
	}
	if b.interval == 0 {
		b.interval = DefaultInterval
	}
	b.reported = now
	return elapsed
}

// reservation is units taken from the limits for a bucket, until the
// window they were taken from ends (after it, unused units went with it).
type reservation struct {
	units int64
	until time.Time
}

// hold records units taken at now, out being the outcome of the taking.
func (b *bucket) hold(units int64, out *check.Outcome, now time.Time) {
	_, _, reset := room(out)
	b.held = append(b.held, reservation{units: units, until: now.Add(reset)})
}

// owe squares the reservations with the allowed count reported: the
// excess is owed, the unused part of each reservation given back unless
// the window it was taken from is over. The allowed count uses the
// oldest first, so that a top-up taken from a new window just before the
// report, and not used yet, is given back and counted in the Envoy's
// next share rather than lost with the report's deny all.
func (b *bucket) owe(allowed int64, now time.Time) {
	for _, r := range b.held {
		used := min(allowed, r.units)
		allowed -= used
		if !now.After(r.until) {
			b.owed -= r.units - used
		}
	}
	b.owed += allowed
	b.held = b.held[:0]
}

// seconds is the bucket's interval in whole seconds, at least one.
func (b *bucket) seconds() int64 {
	return max(1, int64(math.Round(b.interval.Seconds())))
}

// want is the units an Envoy asks for one interval: growth times its
// demand (admitted and denied) over the last, and at least the least
// token bucket (one token and one a second), so that a quiet Envoy's
// next request is not denied until its next report.
func (b *bucket) want(requests uint64, elapsed time.Duration) int64 {
	n := float64(requests)
	if elapsed > 0 {
		n = n * float64(b.interval) / float64(elapsed)
	}
	return int64(min(max(math.Ceil(growth*n), float64(1+b.seconds())), math.MaxUint32))
}

// setShares records sh as st's share of each of b's policy buckets.
func (s *Service) setShares(st *stream, b *bucket, sh Share) {
	for _, ref := range b.refs {
		s.shares.set(ref, st, sh)
	}
}

func (s *Service) logStoreError(err error, out *check.Outcome) {
	if err == nil && out != nil {
		err = out.StoreErr
	}
	s.opts.Logger.Debug("quota assignment answered by the failure mode", "err", err)
}

func (s *Service) blanket(id *rlqsv3.BucketId, action string, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if action == actionDenyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	s.metrics.assignments.WithLabelValues(action).Inc()
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

// tokenBucket is sh as Envoy's token bucket: it starts with sh.Burst
// tokens, holds no more, and refills sh.Tokens a second, so that before
// its next report Envoy admits at most sh.Reserved. The fill interval is
// always one second: Envoy 1.40 reads it in whole seconds, and keeps its
// old limiter when only the interval's seconds change.
func (s *Service) tokenBucket(id *rlqsv3.BucketId, sh Share, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	s.metrics.assignments.WithLabelValues(actionTokenBucket).Inc()
	burst, tokens := uint32(sh.Burst), uint32(sh.Tokens) //nolint:gosec // at most math.MaxUint32 (shape)
	tb := &typev3.TokenBucket{MaxTokens: burst, TokensPerFill: wrapperspb.UInt32(tokens), FillInterval: durationpb.New(time.Second)}
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, ttl)
}

func assignment(id *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}
