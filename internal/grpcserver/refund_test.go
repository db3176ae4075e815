package grpcserver

import (
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
			e := start(t, storetest.Memory(t, nil), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
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
	e := startWith(t, check.Options{Store: storetest.Memory(t, clock.Now), Now: clock.Now}, Options{Domains: DomainBindings{"edge": "ns"}}, nil,
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
