package rlqs_test

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// setClock moves the tests' simulated clock c forward to t.
func setClock(c *ratelimittest.Clock, t time.Time) { c.Advance(t.Sub(c.Now())) }

// A top-up pushed at a window's start reserves the new window's room for
// the Envoy; its report arriving just after must count that reservation
// as its own (it is unused yet) and answer a token bucket of the room,
// not deny all because the room is taken (by itself), which would leave
// the room unused for the whole window, as real Envoys showed.
func TestReportAfterTopUpKeepsTheRoom(t *testing.T) {
	start := time.Unix(1_800_000_000, 0) // a 10 s window's start
	clock := ratelimittest.NewClock(start.Add(time.Second))
	o := rlqs.Options{Now: clock.Now}
	p := startProcess(t, storetest.Memory(t, clock.Now).Backend(), o, policytest.Compile(t, "ns", "window",
		"match: {domain: edge, descriptor: [{key: name}]}\nlimits: [{name: r, fixedWindow: {limit: 300, window: 10s, alignment: Clock}}]"))
	s := p.open(t)
	id := map[string]string{"name": "shop"}
	if _, err := exchange(s, "edge", usage(id, 1, 0)); err != nil {
		t.Fatal(err)
	}
	// Demand far over the limit: the Envoy takes the window's room and
	// stays hungry; no top-up finds room until the window ends.
	setClock(clock, start.Add(6*time.Second))
	resp, err := exchange(s, "edge", usage(id, 18, 10000))
	if err != nil {
		t.Fatal(err)
	}
	first := reservedOf(resp.GetBucketAction()[0])
	t.Logf("report in window 1: %s (%d)", actionOf(resp.GetBucketAction()[0]), first)
	// The next window: the ticks top the Envoy up with its room.
	setClock(clock, start.Add(10*time.Second+50*time.Millisecond))
	top, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("top-up in window 2: %s", actionOf(top.GetBucketAction()[0]))
	// Its report comes 50 ms later, having used the first reservation.
	setClock(clock, start.Add(10*time.Second+100*time.Millisecond))
	resp, err = exchange(s, "edge", usage(id, uint64(first), 10000)) //nolint:gosec // a small count
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetBucketAction()[0]
	got := reservedOf(a)
	t.Logf("report in window 2: %s (%d)", actionOf(a), got)
	if got < 300/2 || got > 300 {
		t.Errorf("the report after a top-up is answered %s, reserving %d of the window's 300: the top-up's reservation is not counted as the Envoy's own", actionOf(a), got)
	}
}

// reservedOf is what a token bucket admits over a 5 s reporting
// interval (its burst and its refill); 0 for a blanket rule.
func reservedOf(a *rlqsv3.RateLimitQuotaResponse_BucketAction) int64 {
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		return 0
	}
	return int64(tb.GetMaxTokens()) + 5*int64(tb.GetTokensPerFill().GetValue())
}
