package grpcserver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// Envoy's negative hits give units back to a descriptor's limits; the
// next charge of that descriptor is then admitted, not denied from the
// denial remembered before the refund, for every algorithm.
func TestRLSRefundAdmitsTheNextCharge(t *testing.T) {
	for _, alg := range []struct{ name, limit string }{
		{"tokenBucket", "tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1h}"},
		{"fixedWindow", "fixedWindow: {limit: 2, window: 1h}"},
		{"slidingWindowLog", "slidingWindowLog: {limit: 2, window: 1h}"},
		{"slidingWindowCounter", "slidingWindowCounter: {limit: 2, window: 1h}"},
		{"leakyBucket", "leakyBucket: {capacity: 2, leakRate: 1, leakInterval: 1h}"},
		{"gcra", "gcra: {rate: 1, period: 1h, burst: 2}"},
	} {
		t.Run(alg.name, func(t *testing.T) {
			e := start(t, storetest.Memory(t, nil).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
				compile(t, "ns", "api", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: l, "+alg.limit+"}]"))
			send := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
				return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}})
			}
			charge := func() ratelimitv3.RateLimitResponse_Code { return send(rlsDescriptor("user", "u")).GetOverallCode() }
			for i, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver, rlsOver} {
				if got := charge(); got != want {
					t.Fatalf("charge %d: %v, want %v", i+1, got, want)
				}
			}
			refund := rlsDescriptor("user", "u")
			refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(1), true
			if resp := send(refund); resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
				t.Fatalf("refund: %v remaining %d, want OK with 1", codesOf(resp), resp.GetStatuses()[0].GetLimitRemaining())
			}
			peek := rlsDescriptor("user", "u")
			peek.HitsAddend = wrapperspb.UInt64(0)
			if resp := send(peek); resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
				t.Fatalf("hits_addend 0 after the refund: %v remaining %d, want OK with 1", codesOf(resp), resp.GetStatuses()[0].GetLimitRemaining())
			}
			if got := charge(); got != rlsOK {
				t.Fatalf("the charge after the refund: %v, want OK", got)
			}
			if got := charge(); got != rlsOver {
				t.Fatalf("the refunded unit admitted twice: %v", got)
			}
		})
	}
}

// A ban outlives no refund: a fixed window whose denial issued a 3 s ban,
// refunded in full during the ban, admits the next charge once the ban
// is over, though the window (an hour) would still have been full.
func TestRLSRefundDuringABan(t *testing.T) {
	clock := ratelimittest.FutureClock()
	e := startWith(t, check.Options{Backend: storetest.Memory(t, clock.Now).Backend(), Now: clock.Now}, Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "api", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]\n"+
			"penalty: {denials: 1, within: 1m, ban: 3s, maxBan: 1m}"))
	send := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
		return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}})
	}
	charge := func() ratelimitv3.RateLimitResponse_Code { return send(rlsDescriptor("user", "u")).GetOverallCode() }
	for i, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, rlsOver, rlsOver} { // the denial bans
		if got := charge(); got != want {
			t.Fatalf("charge %d: %v, want %v", i+1, got, want)
		}
	}
	refund := rlsDescriptor("user", "u")
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(1), true
	send(refund)
	clock.Advance(time.Second)
	if got := charge(); got != rlsOver {
		t.Fatalf("during the ban, after the refund: %v, want OVER_LIMIT", got)
	}
	clock.Advance(2 * time.Second)
	if got := charge(); got != rlsOK {
		t.Fatalf("at the ban's end, the window refunded: %v, want OK", got)
	}
}

// denialCount counts what the decision log is told.
type denialCount struct {
	mu sync.Mutex
	n  int
}

func (d *denialCount) Denied(context.Context, *check.Input, *check.Outcome) {
	d.mu.Lock()
	d.n++
	d.mu.Unlock()
}

// keyCount counts what the top keys are told, and keeps the key values.
type keyCount struct {
	mu   sync.Mutex
	n    int
	seen []string
}

func (k *keyCount) Record(_, _, key string, _ bool, _ time.Time) {
	k.mu.Lock()
	k.n++
	k.seen = append(k.seen, key)
	k.mu.Unlock()
}

// Give-backs over the rate limit service (a refund's negative hits, the
// stream-done release of a request in flight, a refund of a banned
// bucket) are no decisions: they are counted in their own counters, never
// in sluice_decisions_total, the dashboard's counts, the decision log or
// the top keys, though the descriptor is read again for the answer.
func TestRLSGiveBacksAreNoDecisions(t *testing.T) {
	denials, keys := &denialCount{}, &keyCount{}
	e := startWith(t, check.Options{Observer: check.Observers{check.LogDenials(denials), check.RecordKeys(keys)}}, Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "quota", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: hour, fixedWindow: {limit: 5, window: 1h}}]"),
		compile(t, "ns", "api", inFlightPolicy),
		compile(t, "ns", "boxed", "match: {descriptor: [{key: client}]}\nkey: '{descriptor:client}'\npenalty: {denials: 1, within: 1h, ban: 1h, maxBan: 1h}\nlimits: [{name: one, fixedWindow: {limit: 1, window: 1h}}]"))
	send := func(d *ratelimitcommonv3.RateLimitDescriptor) ratelimitv3.RateLimitResponse_Code {
		return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}).GetOverallCode()
	}
	giveBack := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitcommonv3.RateLimitDescriptor {
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
		return d
	}
	for _, step := range []struct {
		d    *ratelimitcommonv3.RateLimitDescriptor
		want ratelimitv3.RateLimitResponse_Code
	}{
		{rlsDescriptor("user", "u"), rlsOK},                                   // a decision
		{giveBack(rlsDescriptor("user", "u")), rlsOK},                         // a refund
		{rlsDescriptor("tenant", "t", "x-request-id", "r1"), rlsOK},           // a decision
		{giveBack(rlsDescriptor("tenant", "t", "x-request-id", "r1")), rlsOK}, // a release
		{rlsDescriptor("client", "c"), rlsOK},                                 // a decision
		{rlsDescriptor("client", "c"), rlsOver},                               // a decision: denied, and banned
		{giveBack(rlsDescriptor("client", "c")), rlsOver},                     // a refund; the ban stays
	} {
		if got := send(step.d); got != step.want {
			t.Fatalf("%v: %v, want %v", step.d, got, step.want)
		}
	}
	decisions := func(policy, limit, result string) float64 {
		return testutil.ToFloat64(counterOf(t, e.reg, "sluice_decisions_total", map[string]string{"namespace": "ns", "policy": policy, "limit": limit, "result": result}))
	}
	for _, c := range []struct {
		policy, limit, result string
		want                  float64
	}{
		{"quota", "hour", "allowed", 1},
		{"api", "inflight", "allowed", 1},
		{"api", "hour", "allowed", 1},
		{"boxed", "one", "allowed", 1},
		{"boxed", "one", "denied", 1},
	} {
		if got := decisions(c.policy, c.limit, c.result); got != c.want {
			t.Errorf("decisions of %s/%s %s: %v, want %v", c.policy, c.limit, c.result, got, c.want)
		}
	}
	for _, lc := range e.tally.Counts() {
		if lc.Allowed+lc.Denied+lc.ShadowDenied > 2 || lc.Policy != "boxed" && lc.Allowed+lc.Denied > 1 {
			t.Errorf("the dashboard's counts of %s/%s: %+v", lc.Policy, lc.Limit, lc)
		}
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_refunds_total", map[string]string{"namespace": "ns", "policy": "quota", "limit": "hour"})); got != 1 {
		t.Errorf("refunds: %v, want 1", got)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_releases_total", map[string]string{"namespace": "ns", "policy": "api", "outcome": "freed"})); got != 1 {
		t.Errorf("releases: %v, want 1", got)
	}
	if denials.n != 1 || keys.n != 4 {
		t.Errorf("decision log told %d denials (want 1), top keys %d decisions (want 4)", denials.n, keys.n)
	}
}

// In a call that charges one descriptor and gives another's cost back
// (its negative hits), the give-back part is read for the answer only:
// the top keys hear of the charged key value alone, and a denial the cache
// of denials answers by the give-back part's ban is no cache hit of a
// decision. The call as a whole is a decision; its give-back parts were
// told to the top keys, and counted in sluice_deny_cache_hits_total.
func TestRLSMixedCallRecordsItsChargesOnly(t *testing.T) {
	keys := &keyCount{}
	e := startWith(t, check.Options{Observer: check.RecordKeys(keys)}, Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "quota", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: hour, fixedWindow: {limit: 5, window: 1h}}]"),
		compile(t, "ns", "boxed", "match: {descriptor: [{key: client}]}\nkey: '{descriptor:client}'\npenalty: {denials: 1, within: 1h, ban: 1h, maxBan: 1h}\nlimits: [{name: one, fixedWindow: {limit: 1, window: 1h}}]"))
	send := func(what string, want ratelimitv3.RateLimitResponse_Code, ds ...*ratelimitcommonv3.RateLimitDescriptor) {
		t.Helper()
		if got := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: ds}).GetOverallCode(); got != want {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	giveBack := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitcommonv3.RateLimitDescriptor {
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
		return d
	}
	send("v charged", rlsOK, rlsDescriptor("user", "v"))
	send("u charged, v refunded", rlsOK, rlsDescriptor("user", "u"), giveBack(rlsDescriptor("user", "v")))
	if want := []string{"v", "u"}; !slices.Equal(keys.seen, want) {
		t.Fatalf("top keys told %q, want %q", keys.seen, want)
	}
	send("c charged", rlsOK, rlsDescriptor("client", "c"))
	send("c denied and banned", rlsOver, rlsDescriptor("client", "c"))
	hits := func() float64 {
		return testutil.ToFloat64(counterOf(t, e.reg, "sluice_deny_cache_hits_total", nil))
	}
	before, told := hits(), len(keys.seen)
	send("u charged, c refunded under its ban", rlsOver, rlsDescriptor("user", "u"), giveBack(rlsDescriptor("client", "c")))
	if got := hits() - before; got != 0 {
		t.Errorf("cache hits of the give-back part: %v, want 0", got)
	}
	if len(keys.seen) != told {
		t.Errorf("top keys told %q of the call answered by the give-back part's ban", keys.seen[told:])
	}
}

// A refund call whose descriptors include a request in flight is made as
// one release, which gives the other descriptors' costs back too: each
// give-back is counted in its own counter, the release in
// sluice_releases_total and the refund in sluice_refunds_total.
func TestRLSRefundBesideAReleaseIsCounted(t *testing.T) {
	e := start(t, storetest.Memory(t, nil).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "quota", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: hour, fixedWindow: {limit: 5, window: 1h}}]"),
		compile(t, "ns", "api", inFlightPolicy))
	send := func(what string, ds ...*ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
		t.Helper()
		resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if resp.GetOverallCode() != rlsOK {
			t.Fatalf("%s: %v", what, resp.GetOverallCode())
		}
		return resp
	}
	giveBack := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitcommonv3.RateLimitDescriptor {
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
		return d
	}
	send("admitted", rlsDescriptor("user", "u"), rlsDescriptor("tenant", "t", "x-request-id", "r1"))
	resp := send("given back", giveBack(rlsDescriptor("user", "u")), giveBack(rlsDescriptor("tenant", "t", "x-request-id", "r1")))
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 5 {
		t.Fatalf("the user's remaining after the refund: %d, want 5", got)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_refunds_total", map[string]string{"namespace": "ns", "policy": "quota", "limit": "hour"})); got != 1 {
		t.Errorf("refunds of quota/hour: %v, want 1", got)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_releases_total", map[string]string{"namespace": "ns", "policy": "api", "outcome": "freed"})); got != 1 {
		t.Errorf("releases freed: %v, want 1", got)
	}
}
