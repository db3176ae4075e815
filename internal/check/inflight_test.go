package check

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// A duplicate of a holder that holds must reach the store even when the
// cache of denials knows another limit of the request denies: its hold
// remembers it, so that the duplicate's release frees nothing. Answered
// from the cache, the release freed the first request's unit while it ran.
func TestDuplicateDeniedFromTheCacheIsRemembered(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now}, policytest.Compile(t, "ns", "p", `
key: global
limits:
- {name: inflight, concurrency: {limit: 1, leaseTimeout: 1h}}
- {name: minute, fixedWindow: {limit: 1, window: 1m}}
`))
	ctx := context.Background()
	admit := func(holder string) *Outcome {
		t.Helper()
		out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if !admit("x").Allowed {
		t.Fatal("x: denied")
	}
	if admit("y").Allowed { // the minute's denial is remembered
		t.Fatal("y: admitted")
	}
	if admit("x").Allowed {
		t.Fatal("x's duplicate: admitted")
	}
	out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Holder: "x", Action: ratelimit.Release})
	if err != nil {
		t.Fatal(err)
	}
	if out.Allowed {
		t.Fatal("the duplicate's release freed x's unit")
	}
	clock.Advance(time.Minute)
	if admit("y").Allowed {
		t.Fatal("y admitted while x runs: two in flight under a limit of 1")
	}
}

// Give-backs answered by a failure mode (Redis away) are no decisions
// either: sluice_failure_mode_decisions_total counts the consuming checks
// alone, not a refund, a release, nor the read of a part that gave its
// cost back.
func TestGiveBacksCountNoFailureModeDecision(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	failing := &countingStore{Store: storetest.Memory(t, clock.Now), err: errors.New("redis: connection refused")}
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: failing}, Now: clock.Now, Metrics: NewMetrics(reg), BreakerThreshold: 1000},
		policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
		policytest.Compile(t, "ns", "inflight", "key: global\nlimits: [{name: c, concurrency: {limit: 5}}]"))
	ctx := context.Background()
	for _, in := range []Input{
		{Namespace: "ns", Policy: "p", Request: request(), Action: ratelimit.Refund},
		{Namespace: "ns", Policy: "inflight", Request: request(), Holder: "x", Action: ratelimit.Release},
		{Namespace: "ns", Policy: "p", Parts: []Part{{Request: request(), CostSet: true, Refunded: true}}},
		{Namespace: "ns", Policy: "p", Request: request()}, // the one decision
	} {
		if _, err := c.Check(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(c.metrics.failureMode.WithLabelValues("open")); got != 1 {
		t.Fatalf("failure mode decisions: %v, want 1 (the consuming check)", got)
	}
}

// A duplicate denied before the store (here by another policy's missing
// key with onMissingKey Deny; over RLS by a limit of 0 or an untrackable
// holder: TestRLSDuplicateDeniedBeforeTheStore) is remembered on the hold all the same:
// the request reaches the store for that alone, taking nothing, so that
// its release frees nothing while the first request runs. Denied without
// the store, the duplicate's release freed x's unit: two in flight under
// a limit of 1.
func TestDuplicateDeniedBeforeTheStoreIsRemembered(t *testing.T) {
	for _, tc := range []struct {
		name string
		deny func(in *Input) // makes in's request denied before the store
	}{
		{"a missing key", func(in *Input) { in.Request.Header.Del("X-Plan") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
			c := newChecker(t, Options{Now: clock.Now},
				policytest.Compile(t, "ns", "inflight", "key: global\nlimits: [{name: c, concurrency: {limit: 1, leaseTimeout: 1h}}]"),
				policytest.Compile(t, "ns", "plan", "key: '{header:X-Plan}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"))
			ctx := context.Background()
			in := func(holder string, action ratelimit.Action) Input {
				r := request()
				r.Header.Set("X-Plan", "gold")
				return Input{Namespace: "ns", Request: r, Holder: holder, Action: action}
			}
			check := func(in Input) bool {
				t.Helper()
				out, err := c.Check(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				return out.Allowed
			}
			if !check(in("x", ratelimit.Consume)) {
				t.Fatal("x: denied")
			}
			dup := in("x", ratelimit.Consume)
			tc.deny(&dup)
			if check(dup) {
				t.Fatal("x's duplicate: admitted")
			}
			if check(in("x", ratelimit.Release)) {
				t.Fatal("the duplicate's release freed x's unit")
			}
			if check(in("y", ratelimit.Consume)) {
				t.Fatal("y admitted while x runs: two in flight under a limit of 1")
			}
			if !check(in("x", ratelimit.Release)) || !check(in("y", ratelimit.Consume)) {
				t.Fatal("x's own release freed nothing")
			}
		})
	}
}
