package check

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// everyAlgorithm is a limit of 2 per hour (or as near as the algorithm
// says it) for each algorithm: a denial after two requests that lasts far
// longer than any test.
var everyAlgorithm = []struct{ name, limit string }{
	{"tokenBucket", "tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1h}"},
	{"fixedWindow", "fixedWindow: {limit: 2, window: 1h}"},
	{"slidingWindowLog", "slidingWindowLog: {limit: 2, window: 1h}"},
	{"slidingWindowCounter", "slidingWindowCounter: {limit: 2, window: 1h}"},
	{"leakyBucket", "leakyBucket: {capacity: 2, leakRate: 1, leakInterval: 1h}"},
	{"gcra", "gcra: {rate: 1, period: 1h, burst: 2}"},
}

// A refund raises the room of the buckets it touched: the denial this
// process remembered of them no longer holds, and the next charge is the
// store's to decide, for every algorithm.
func TestRefundDropsRememberedDenials(t *testing.T) {
	for _, alg := range everyAlgorithm {
		t.Run(alg.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
			counting := &countingStore{Store: storetest.Memory(t, clock.Now)}
			c := newChecker(t, Options{Backend: ratelimit.Backend{Store: counting}, Now: clock.Now}, policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, "+alg.limit+"}]"))
			ctx := context.Background()
			charge := func() *Outcome {
				t.Helper()
				out, err := c.Check(ctx, Input{Namespace: "ns", Request: request()})
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			for i := 0; i < 3; i++ {
				if out := charge(); out.Allowed != (i < 2) {
					t.Fatalf("charge %d: allowed %v", i+1, out.Allowed)
				}
			}
			if out := charge(); out.Allowed || !out.Limits[0].Cached {
				t.Fatalf("after the denial: allowed %v cached %v, want a remembered denial", out.Allowed, out.Limits[0].Cached)
			}
			clock.Advance(time.Second)
			out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Action: ratelimit.Refund})
			if err != nil {
				t.Fatal(err)
			}
			if !out.Allowed || out.Limits[0].Remaining != 1 {
				t.Fatalf("refund: allowed %v remaining %d, want 1 unit back", out.Allowed, out.Limits[0].Remaining)
			}
			calls := counting.calls
			out = charge()
			if !out.Allowed || out.Limits[0].Cached || counting.calls != calls+1 {
				t.Fatalf("after the refund: allowed %v cached %v store calls +%d, want allowed by the store", out.Allowed, out.Limits[0].Cached, counting.calls-calls)
			}
			if out := charge(); out.Allowed {
				t.Fatal("the refunded unit admitted twice")
			}
		})
	}
}

// A denial decided by a call sent before a refund of its key, and
// answered after it, is not remembered: it may predate the refund's room.
func TestDenyCacheKeepsNoDenialSentBeforeARefund(t *testing.T) {
	c := newDenyCache(1000)
	now := time.Unix(1_800_000_000, 0)
	denial := func(from time.Time) deniedEntry { return deniedEntry{until: from.Add(time.Hour), cost: 1} }
	c.store("a", denial(now), now)
	c.store("b", denial(now), now)
	c.forget([]string{"a"}, now.Add(time.Second))
	if _, ok := c.lookup("a", 1, ratelimit.Limit{}, now.Add(time.Second)); ok {
		t.Fatal("a refunded key is still denied")
	}
	if _, ok := c.lookup("b", 1, ratelimit.Limit{}, now.Add(time.Second)); !ok {
		t.Fatal("a refund of another key dropped this one's denial")
	}
	c.store("a", denial(now), now.Add(time.Second)) // sent at the refund's instant
	if _, ok := c.lookup("a", 1, ratelimit.Limit{}, now.Add(2*time.Second)); ok {
		t.Fatal("a denial sent before the refund was remembered after it")
	}
	c.store("a", denial(now), now.Add(2*time.Second))
	if _, ok := c.lookup("a", 1, ratelimit.Limit{}, now.Add(2*time.Second)); !ok {
		t.Fatal("a denial sent after the refund is not remembered")
	}
	c.forgetAll(now.Add(3 * time.Second))
	c.store("b", denial(now), now.Add(3*time.Second))
	for _, k := range []string{"a", "b"} {
		if _, ok := c.lookup(k, 1, ratelimit.Limit{}, now.Add(3*time.Second)); ok {
			t.Fatalf("%s denied after every key was forgotten", k)
		}
	}
}

// Under a lease (spec.lease) the lease store remembers a failed take as
// well: a refund drops that denial too. The units the lease store gives
// back on its own are refunds like any other: announced to the other
// processes.
func TestRefundsThroughALeaseStore(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	leases := lease.New(storetest.Memory(t, clock.Now).Backend(), lease.Options{Now: clock.Now})
	defer leases.Close()
	announced := make(chan []string, 16)
	c := newChecker(t, Options{Backend: leases.Backend(), Now: clock.Now, Observer: Announce(func(keys []string) { announced <- append([]string(nil), keys...) }, nil)},
		policytest.Compile(t, "ns", "p", "key: global\nlease: {units: 2, ttl: 1s}\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	ctx := context.Background()
	charge := func(action ratelimit.Action) *Outcome {
		t.Helper()
		out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Action: action})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i := 0; i < 3; i++ { // one lease of 2, then a failed take
		if out := charge(ratelimit.Consume); out.Allowed != (i < 2) {
			t.Fatalf("charge %d: allowed %v", i+1, out.Allowed)
		}
	}
	clock.Advance(time.Second)
	charge(ratelimit.Refund)
	key := ratelimit.Key("ns", "p", "global", "l")
	if got := <-announced; len(got) != 1 || got[0] != key {
		t.Fatalf("the refund announced %q, want [%s]", got, key)
	}
	if out := charge(ratelimit.Consume); !out.Allowed {
		t.Fatal("after the refund: denied, from the lease's last failed take")
	}

	clock.Advance(time.Hour) // a new window: a lease of 2, one left over
	if out := charge(ratelimit.Consume); !out.Allowed {
		t.Fatal("denied in a new window")
	}
	clock.Advance(time.Second)
	charge(ratelimit.Consume) // the lease expired: its unit goes back, and a new one is taken
	select {
	case got := <-announced:
		if len(got) != 1 || got[0] != key {
			t.Fatalf("the lease's refund announced %q, want [%s]", got, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease's refund was not announced (stats %+v)", leases.Stats())
	}
}

// A refund is no decision: it is counted in sluice_refunds_total, and
// neither in sluice_decisions_total nor in the dashboard's counts.
func TestRefundsCountedApart(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	m := NewMetrics(prometheus.NewRegistry())
	tally := NewTally(m)
	c := newChecker(t, Options{Now: clock.Now, Metrics: m, Observer: tally},
		policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"))
	ctx := context.Background()
	for _, action := range []ratelimit.Action{ratelimit.Consume, ratelimit.Consume, ratelimit.Refund, ratelimit.DryRun} {
		if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Action: action}); err != nil {
			t.Fatal(err)
		}
	}
	allowed := testutil.ToFloat64(m.decisions.WithLabelValues("ns", "p", "l", string(ResultAllowed)))
	refunds := testutil.ToFloat64(m.refunds.WithLabelValues("ns", "p", "l"))
	if allowed != 2 || refunds != 1 {
		t.Fatalf("decisions allowed %v, refunds %v; want 2 and 1", allowed, refunds)
	}
	if counts := tally.Counts(); len(counts) != 1 || counts[0].Allowed != 2 {
		t.Fatalf("dashboard counts %+v, want 2 allowed", counts)
	}
}
