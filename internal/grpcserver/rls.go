package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/tracing"
)

const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// MaxDescriptors bounds the descriptors of one rate limit service request:
// they come from the proxy's route configuration, a handful per route, and
// each is matched against every policy of its namespace.
const MaxDescriptors = check.MaxParts

// rls is Envoy's Rate Limit Service v3 (the protocol of envoyproxy/ratelimit):
// each descriptor of a request is one part of one check, so a request's
// descriptors are decided all or nothing in one store call.
type rls struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	s     *Server
	state sync.Pool
	// answers are responses done with: each is reused once gRPC has
	// written it (serveShouldRateLimit).
	answers sync.Pool

	// unbound remembers the unbound domains already logged, so a
	// misconfigured proxy is reported once per domain, not per request.
	unboundMu sync.Mutex
	unbound   map[string]bool

	// ownLimits are the descriptors' own limits compiled so far, by
	// ownLimitKey, for reuse: up to maxOwnLimits, past which others
	// compile per request.
	ownLimits sync.Map
	ownHeld   atomic.Int64
}

// rlsState is one call's reusable memory.
type rlsState struct {
	in      rlsRequest
	reqs    []policy.Request
	parts   []check.Part
	refunds []check.Part // the descriptors with negative hits, to give back
	// settles are the descriptors with negative hits as settlements of
	// reservations (charge Reserve): each one's hits_addend is the actual
	// cost, 0 included.
	settles []check.Part
	// clamped counts the hits_addend of this call above the largest count
	// (ratelimit.MaxCount), read as that count.
	clamped int
	out     check.Outcome
	headers checkhttp.HeaderScratch
}

func newRLS(s *Server) *rls {
	r := &rls{s: s, unbound: map[string]bool{}}
	r.state.New = func() any { return &rlsState{} }
	r.answers.New = func() any { return new(rlsAnswer) }
	return r
}

func registerRLS(s *Server) {
	s.grpc.RegisterService(&rlsServiceDesc, newRLS(s))
}

// rlsServiceDesc is ratelimitv3.RateLimitService_ServiceDesc with
// ShouldRateLimit served by serveShouldRateLimit: a unary call, as grpc-go
// serves every unary method (one message each way, the same checks of
// cardinality), whose handler sees its response written and so can reuse
// its memory.
var rlsServiceDesc = grpc.ServiceDesc{
	ServiceName: ratelimitv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: ratelimitv3.RateLimitService_ServiceDesc.HandlerType,
	Streams: []grpc.StreamDesc{{
		StreamName: "ShouldRateLimit",
		Handler:    func(srv any, stream grpc.ServerStream) error { return srv.(*rls).serveShouldRateLimit(stream) },
	}},
	Metadata: ratelimitv3.RateLimitService_ServiceDesc.Metadata,
}

// serveShouldRateLimit is ShouldRateLimit on the wire: it reads the
// request (parsed by serverCodec), answers it, and reuses the call's and
// the response's memory once the response is written.
func (r *rls) serveShouldRateLimit(stream grpc.ServerStream) error {
	st := r.state.Get().(*rlsState)
	defer r.release(st)
	if err := stream.RecvMsg(&st.in); err != nil {
		return err
	}
	a := r.answers.Get().(*rlsAnswer)
	err := r.answer(stream.Context(), st, a)
	if err == nil {
		err = stream.SendMsg(&a.resp)
	}
	a.reset()
	r.answers.Put(a)
	return err
}

// ShouldRateLimit implements the rate limit service for a caller in
// process; the server's calls take serveShouldRateLimit.
func (r *rls) ShouldRateLimit(ctx context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	st := r.state.Get().(*rlsState)
	defer r.release(st)
	st.in.fromMessage(req)
	a := new(rlsAnswer)
	if err := r.answer(ctx, st, a); err != nil {
		return nil, err
	}
	return &a.resp, nil
}

// release returns st to the pool, keeping none of the call's values
// reachable.
func (r *rls) release(st *rlsState) {
	st.in.reset()
	clear(st.reqs)
	clear(st.parts)
	clear(st.refunds)
	clear(st.settles)
	r.state.Put(st)
}

// answer decides st's request into a and counts the answer. An
// unreadable request is INVALID_ARGUMENT and a failed check INTERNAL:
// errors, which the proxy's failure_mode_deny answers. Redis being away
// is not an error: each matching policy's failureMode answers it.
func (r *rls) answer(ctx context.Context, st *rlsState, a *rlsAnswer) error {
	err := r.decide(ctx, st, a)
	r.s.metrics.rls.answered(grpcstatus.Code(err))
	return err
}

func (r *rls) decide(ctx context.Context, st *rlsState, a *rlsAnswer) error {
	in := &st.in
	if err := validateRLS(in); err != nil {
		return grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	namespace, bound := r.s.opts.Domains[in.domain]
	if !bound {
		// Envoy's ratelimit service answers a domain it has no
		// configuration for with OK; so does Sluice, for a domain the
		// operator bound to no namespace.
		r.reportUnbound(in.domain)
		a.okForEach(len(in.descriptors))
		return nil
	}
	if err := st.read(r.ownLimitsOf(namespace)); err != nil {
		return grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if st.clamped > 0 {
		r.s.metrics.clampedHits.Add(float64(st.clamped))
	}
	ctx, span := r.s.opts.Tracer.StartGRPC(ctx, tracing.IntakeRLS, namespace)
	err := r.check(ctx, namespace, st)
	span.End(&st.out, err)
	if err != nil {
		return r.checkFailed(in.domain, err)
	}
	a.fill(st, r.s.opts.Now())
	a.resp.DynamicMetadata = r.s.ruleMetadata(&st.out)
	return nil
}

// check decides st's descriptors into st.out, after giving back its
// negative hits.
func (r *rls) check(ctx context.Context, namespace string, st *rlsState) error {
	if len(st.refunds) > 0 {
		// Negative hits go back first, in a call of their own; the
		// descriptors then read their limits in the call below.
		if err := r.s.opts.Checker.CheckInto(ctx, check.Input{Namespace: namespace, Parts: st.refunds, Action: ratelimit.Refund}, &st.out); err != nil {
			return err
		}
	}
	if len(st.settles) > 0 {
		// The same descriptors settle the reservations of policies with
		// charge Reserve, which a refund leaves alone (no store call when
		// none matches).
		if err := r.s.opts.Checker.CheckInto(ctx, check.Input{Namespace: namespace, Parts: st.settles, Action: ratelimit.Settle}, &st.out); err != nil {
			return err
		}
	}
	return r.s.opts.Checker.CheckInto(ctx, check.Input{Namespace: namespace, Parts: st.parts}, &st.out)
}

// checkFailed is the status of a request the checker returned err for:
// INVALID_ARGUMENT for one whose descriptors meet more limits than one
// check evaluates (Envoy's failure_mode_deny answers it, as any request it
// cannot have decided), else INTERNAL (a bug: Redis being away is answered
// by the failure modes, a holder Sluice cannot track by a denial).
func (r *rls) checkFailed(domain string, err error) error {
	if errors.Is(err, check.ErrTooManyLimits) {
		return grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	r.s.opts.Logger.Error("rate limit check failed", "domain", domain, "err", err)
	return grpcstatus.Error(codes.Internal, "check failed: "+err.Error())
}

// validateRLS refuses what envoyproxy/ratelimit refuses (no domain, no
// descriptors) and more descriptors than MaxDescriptors.
func validateRLS(in *rlsRequest) error {
	switch n := len(in.descriptors); {
	case in.domain == "":
		return fmt.Errorf("domain: must not be empty")
	case n == 0:
		return fmt.Errorf("descriptors: must not be empty")
	case n > MaxDescriptors:
		return fmt.Errorf("descriptors: %d, more than %d", n, MaxDescriptors)
	}
	return nil
}

func (r *rls) reportUnbound(domain string) {
	r.unboundMu.Lock()
	defer r.unboundMu.Unlock()
	if r.unbound[domain] || len(r.unbound) >= 64 {
		return
	}
	r.unbound[domain] = true
	r.s.opts.Logger.Warn("rate limit requests for a domain no namespace is bound to are answered OK; bind it with --rls-domain DOMAIN=NAMESPACE",
		"domain", intake.Excerpt(domain))
}

// okForEach makes a the answer for n descriptors no policy can match.
func (a *rlsAnswer) okForEach(n int) {
	a.resp.OverallCode = ratelimitv3.RateLimitResponse_OK
	parts := a.partsFor(n)
	for i := range parts {
		parts[i].status.Code = ratelimitv3.RateLimitResponse_OK
		a.resp.Statuses[i] = &parts[i].status
	}
}

// read turns each descriptor into a part: its entries, the limit it
// carries when ownLimit is set (which then decides it instead of the
// namespace's policies), and its cost: the descriptor's hits_addend when
// set (0 checks without counting), else the request's when above 0, else
// the policies' own cost. A descriptor with is_negative_hits is also a
// refund of that cost (st.refunds) and a settlement at that cost of the
// reservations it names (st.settles), and checks without counting.
func (st *rlsState) read(own ownLimits) error {
	in := &st.in
	descriptors := in.descriptors
	st.reqs = slices.Grow(st.reqs[:0], len(descriptors))[:len(descriptors)]
	st.parts = slices.Grow(st.parts[:0], len(descriptors))[:len(descriptors)]
	st.refunds = st.refunds[:0]
	st.settles = st.settles[:0]
	st.clamped = 0
	for i := range descriptors {
		d := &descriptors[i]
		st.reqs[i] = policy.Request{Kind: policy.KindDescriptor, Domain: in.domain, Descriptor: in.entries[d.from:d.to:d.to]}
		st.reqs[i].ClientIP = descriptorClient(&st.reqs[i])
		part := check.Part{Request: &st.reqs[i]}
		if d.hasLimit && own.r != nil {
			policies, err := own.r.ownLimit(own.namespace, i, d.limit)
			if err != nil {
				return err
			}
			part.Policies = policies
		}
		switch {
		case d.hasHitsAddend:
			part.Cost, part.CostSet = st.clampCost(d.hitsAddend), true
		case in.hitsAddend > 0:
			part.Cost, part.CostSet = st.clampCost(uint64(in.hitsAddend)), true
		}
		if d.negativeHits {
			// Given back as much as a check would take; then read only,
			// which is no decision.
			if !part.CostSet || part.Cost > 0 {
				st.refunds = append(st.refunds, part)
			}
			st.settles = append(st.settles, part)
			part.Cost, part.CostSet, part.Refunded = 0, true, true
		}
		st.parts[i] = part
	}
	return nil
}

// descriptorClient is the client a descriptor names in its
// remote_address entry (Envoy's remote_address action), read as every
// intake reads a client's address (an IPv4 client plain, though a
// dual-stack listener names it ::ffff:192.0.2.1), so that what reports
// the client (the decision log) reports it alike for every transport;
// none when the descriptor names none.
func descriptorClient(r *policy.Request) netip.Addr {
	if v, ok := r.Lookup("remote_address"); ok {
		if a, err := intake.ReadAddress(v); err == nil {
			return a
		}
	}
	return netip.Addr{}
}

// ownUnit is a unit a descriptor's own limit may name: its limit name
// and length.
type ownUnit struct {
	name   string
	length time.Duration
}

// ownUnits are the units of a descriptor's own limit by the response's
// numbering, as envoyproxy/ratelimit reads the descriptor's unit (Envoy's
// RateLimitUnit numbers SECOND to YEAR alike; 7 is the response's WEEK).
var ownUnits = func() map[ratelimitv3.RateLimitResponse_RateLimit_Unit]ownUnit {
	m := make(map[ratelimitv3.RateLimitResponse_RateLimit_Unit]ownUnit, len(units))
	for length, u := range units {
		m[u] = ownUnit{name: strings.ToLower(u.String()), length: length}
	}
	return m
}()

// ownLimitKey names a compiled descriptor limit.
type ownLimitKey struct {
	namespace  string
	unit       ratelimitv3.RateLimitResponse_RateLimit_Unit
	multiplier uint32
	perUnit    int64
}

// maxOwnLimits bounds the descriptor limits kept compiled: the numbers
// come from the proxy's route configuration or dynamic metadata, a
// handful in practice.
const maxOwnLimits = 4096

// maxOwnWindow is the longest window a limit may count over.
const maxOwnWindow = 8784 * time.Hour

// ownLimits reads the limits descriptors carry for a namespace; its r is
// nil when the operator turned them off.
type ownLimits struct {
	r         *rls
	namespace string
}

func (r *rls) ownLimitsOf(namespace string) ownLimits {
	if r.s.opts.IgnoreDescriptorLimits {
		return ownLimits{}
	}
	return ownLimits{r: r, namespace: namespace}
}

// ownLimit is the policy that decides descriptor at instead of the
// namespace's, from the limit it carries, as envoyproxy/ratelimit applies
// it (policy.DescriptorLimit): requests_per_unit per unit (times
// unit_multiplier, which Envoy sends from 1.35 on), in a window aligned to
// the clock. A number above the engine's bound counts as the bound; 0
// denies every request that counts, as the peer answers it.
func (r *rls) ownLimit(namespace string, at int, o ownLimitSpec) ([]*policy.Policy, error) {
	unit := ratelimitv3.RateLimitResponse_RateLimit_Unit(o.unit)
	u, ok := ownUnits[unit]
	if !ok {
		return nil, fmt.Errorf("descriptors[%d].limit.unit: %d is no unit; want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", at, o.unit)
	}
	multiplier := uint32(1)
	if o.hasMultiplier {
		multiplier = o.multiplier
		if multiplier == 0 || time.Duration(multiplier) > maxOwnWindow/u.length {
			return nil, fmt.Errorf("descriptors[%d].limit.unit_multiplier: %d; want 1 to %d %s windows (366 days)", at, multiplier, maxOwnWindow/u.length, u.name)
		}
	}
	key := ownLimitKey{namespace: namespace, unit: unit, multiplier: multiplier, perUnit: min(int64(o.requestsPerUnit), ratelimit.MaxCount)}
	if v, ok := r.ownLimits.Load(key); ok {
		return v.([]*policy.Policy), nil
	}
	name := u.name
	if multiplier > 1 {
		name = fmt.Sprintf("%d-%s", multiplier, u.name)
	}
	p, err := policy.DescriptorLimit(namespace, name, time.Duration(multiplier)*u.length, key.perUnit)
	if err != nil {
		return nil, fmt.Errorf("descriptors[%d].limit: %w", at, err)
	}
	own := []*policy.Policy{p}
	if r.ownHeld.Load() < maxOwnLimits {
		if v, loaded := r.ownLimits.LoadOrStore(key, own); loaded {
			return v.([]*policy.Policy), nil
		}
		r.ownHeld.Add(1)
	}
	return own, nil
}

// clampCost keeps a cost in the engine's range; any cost above a limit's
// capacity is denied the same.
func (st *rlsState) clampCost(n uint64) int64 {
	if n > ratelimit.MaxCount {
		st.clamped++
		return ratelimit.MaxCount
	}
	return int64(n)
}

// fill renders st's outcome into a: a status per descriptor from its
// verdict (check.Outcome.Part), OVER_LIMIT overall when any enforced limit
// denied (or a failure mode or missing key did), and the answer's
// rate-limit headers.
func (a *rlsAnswer) fill(st *rlsState, now time.Time) {
	out := &st.out
	resp := &a.resp
	resp.OverallCode = ratelimitv3.RateLimitResponse_OK
	if !out.Allowed {
		resp.OverallCode = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	parts := a.partsFor(len(st.parts))
	for i := range parts {
		resp.Statuses[i] = parts[i].fill(out, i)
	}
	resp.ResponseHeadersToAdd = a.headerValues(st.headers.RenderStrings(out, now))
	resp.RequestHeadersToAdd = nil
	if v := checkhttp.OverLimit(out); v != "" { // to the upstream
		a.over = corev3.HeaderValue{Key: checkhttp.OverLimitHeader, Value: v}
		a.overPtr[0] = &a.over
		resp.RequestHeadersToAdd = a.overPtr[:]
	}
}

// rlsAnswer is the memory of one response, reused from call to call once
// gRPC has written it: the response, its headers, and the descriptors'
// statuses.
type rlsAnswer struct {
	resp       ratelimitv3.RateLimitResponse
	headerPtrs [checkhttp.NumHeaders]*corev3.HeaderValue
	header     [checkhttp.NumHeaders]corev3.HeaderValue
	statuses   []*ratelimitv3.RateLimitResponse_DescriptorStatus
	parts      []partAnswer
	// over is checkhttp.OverLimitHeader for the upstream, when sent.
	over    corev3.HeaderValue
	overPtr [1]*corev3.HeaderValue
}

// partsFor makes room for n descriptors' statuses: resp.Statuses of n
// and the n partAnswers they are to point into, zero.
func (a *rlsAnswer) partsFor(n int) []partAnswer {
	if cap(a.parts) < n {
		a.parts = make([]partAnswer, n)
		a.statuses = make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, n)
	}
	a.resp.Statuses = a.statuses[:n:n]
	return a.parts[:n]
}

// reset makes a as new for the next call, keeping its statuses' memory
// and their limits' names.
func (a *rlsAnswer) reset() {
	for i := range a.parts {
		a.parts[i] = partAnswer{name: a.parts[i].name}
	}
	clear(a.statuses)
	parts, statuses := a.parts, a.statuses
	*a = rlsAnswer{parts: parts, statuses: statuses}
}

// partAnswer is one descriptor's status with its limit and time until
// reset.
type partAnswer struct {
	status     ratelimitv3.RateLimitResponse_DescriptorStatus
	limit      ratelimitv3.RateLimitResponse_RateLimit
	untilReset durationpb.Duration
	// name is the last limit name this descriptor's place was answered
	// with, kept from call to call: mostly the same limit answers it
	// again, and then the name costs nothing.
	name string
}

// fill fills descriptor part's status from the part's verdict and
// returns it: its shown limit's figures, and OVER_LIMIT when the part
// took part in the denial.
func (pa *partAnswer) fill(out *check.Outcome, part int) *ratelimitv3.RateLimitResponse_DescriptorStatus {
	status := &pa.status
	status.Code = ratelimitv3.RateLimitResponse_OK
	v := out.Part(part)
	if v.Denied {
		status.Code = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	lr := v.Shown // a hidden limit's figures never reach the client
	if lr == nil {
		// No figures: no policy limits the part, or another part's
		// denial was answered from the cache of denials, which read
		// nothing from the store. Its limit with a remaining 0 would be
		// false (nothing was charged to it), and Envoy would send that
		// 0 on to the client.
		return status
	}
	if fillLimit(&pa.limit, lr, pa.name) {
		pa.name = pa.limit.Name
		status.CurrentLimit = &pa.limit
	}
	status.LimitRemaining = uint32(min(max(out.ShownRemaining(lr), 0), 1<<32-1)) //nolint:gosec // clamped to uint32
	pa.untilReset.Seconds = int64(lr.Reset / time.Second)
	pa.untilReset.Nanos = int32(lr.Reset % time.Second) //nolint:gosec // below 1e9
	status.DurationUntilReset = &pa.untilReset
	return status
}

// units are the rate limit service's units, by their length.
var units = map[time.Duration]ratelimitv3.RateLimitResponse_RateLimit_Unit{
	time.Second:          ratelimitv3.RateLimitResponse_RateLimit_SECOND,
	time.Minute:          ratelimitv3.RateLimitResponse_RateLimit_MINUTE,
	time.Hour:            ratelimitv3.RateLimitResponse_RateLimit_HOUR,
	24 * time.Hour:       ratelimitv3.RateLimitResponse_RateLimit_DAY,
	7 * 24 * time.Hour:   ratelimitv3.RateLimitResponse_RateLimit_WEEK,
	30 * 24 * time.Hour:  ratelimitv3.RateLimitResponse_RateLimit_MONTH,
	365 * 24 * time.Hour: ratelimitv3.RateLimitResponse_RateLimit_YEAR,
}

// fillLimit describes lr's limit in dst as requests per unit where it is
// one: a window's limit per window, a bucket's rate per interval, when
// that span is one of the protocol's units. It reports whether it was.
// The limit's name is reused from name when it is that already.
func fillLimit(dst *ratelimitv3.RateLimitResponse_RateLimit, lr *check.LimitResult, name string) bool {
	l := lr.Limit.Limit
	perUnit := l.Capacity
	if l.Rate > 0 {
		perUnit = l.Rate
	}
	unit, ok := units[l.Interval]
	if !ok || perUnit > 1<<32-1 || l.Algorithm == ratelimit.Concurrency { // in flight is no rate per unit
		return false
	}
	dst.Name = limitName(name, lr.Policy.Name, lr.Limit.Name)
	dst.RequestsPerUnit = uint32(perUnit) //nolint:gosec // checked above
	dst.Unit = unit
	return true
}

// limitName is policy/limit: name itself when it reads so already.
func limitName(name, policy, limit string) string {
	if len(name) == len(policy)+1+len(limit) && name[:len(policy)] == policy && name[len(policy)] == '/' && name[len(policy)+1:] == limit {
		return name
	}
	return policy + "/" + limit
}

// headerValues is the response's headers from RenderStrings' values, in
// checkhttp.HeaderNames' order.
func (a *rlsAnswer) headerValues(vals []string) []*corev3.HeaderValue {
	n := 0
	for i, v := range vals {
		if v == "" {
			continue
		}
		h := &a.header[n]
		h.Key, h.Value = checkhttp.HeaderNames[i], v
		a.headerPtrs[n] = h
		n++
	}
	if n == 0 {
		return nil
	}
	return a.headerPtrs[:n:n]
}
