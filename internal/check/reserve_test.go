package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

const tokenBudget = `
key: global
charge: Reserve
reserve: {max: 500, ttl: 10m}
cost: 100
limits: [{name: hour, fixedWindow: {limit: 1000, window: 1h}}]
`

// reserveCheck runs one check and returns its outcome.
func reserveCheck(t *testing.T, c *Checker, in Input) *Outcome {
	t.Helper()
	if in.Namespace == "" {
		in.Namespace = "ns"
	}
	if in.Request == nil && in.Parts == nil {
		in.Request = request()
	}
	out, err := c.Check(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func reservationOf(t *testing.T, out *Outcome) (ReservationOutcome, int64, int64) {
	t.Helper()
	if len(out.Policies) != 1 {
		t.Fatalf("%d policies", len(out.Policies))
	}
	return out.Policies[0].Reservation()
}

// Reserve, then settle: the estimate is taken at admission (clamped to
// reserve.max), a holder's duplicate admission is denied, and a
// settlement replaces the reservation by the actual cost, giving back or
// taking the difference; a second settlement, or one of a holder that
// holds nothing, changes nothing. Over the memory store, Redis and a
// lease store (which sends reservations to Redis).
func TestReserveThenSettle(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		reg := prometheus.NewRegistry()
		c := newChecker(t, Options{Backend: store, Metrics: NewMetrics(reg)}, policytest.Compile(t, "ns", "p", tokenBudget))
		remaining := func(out *Outcome) int64 { return out.Limits[0].Remaining }

		a := reserveCheck(t, c, Input{Holder: "a", Cost: 300})
		if o, r, _ := reservationOf(t, a); !a.Allowed || o != ReservationReserved || r != 300 || remaining(a) != 700 || a.Limits[0].Reserved != 300 {
			t.Fatalf("a: allowed %v, %s %d, remaining %d, reserved %d", a.Allowed, o, r, remaining(a), a.Limits[0].Reserved)
		}
		if !a.Reserves() || !a.Holds() {
			t.Fatal("a holds no reservation to settle")
		}
		if dup := reserveCheck(t, c, Input{Holder: "a", Cost: 1}); dup.Allowed {
			t.Fatal("a's duplicate admitted")
		}
		b := reserveCheck(t, c, Input{Holder: "b", Cost: 2000}) // clamped to 500
		if o, r, _ := reservationOf(t, b); !b.Allowed || o != ReservationReserved || r != 500 || remaining(b) != 200 || b.Limits[0].Reserved != 800 {
			t.Fatalf("b: allowed %v, %s %d, remaining %d, reserved %d", b.Allowed, o, r, remaining(b), b.Limits[0].Reserved)
		}

		// The duplicate's settlement, then a's own: one of them changes
		// nothing, the other settles (the holder's last one settles).
		dupSettle := reserveCheck(t, c, Input{Holder: "a", Cost: 100, Action: ratelimit.Settle})
		settled := reserveCheck(t, c, Input{Holder: "a", Cost: 100, Action: ratelimit.Settle})
		if dupSettle.Allowed || !settled.Allowed {
			t.Fatalf("the duplicate's settlement settled %v, a's %v", dupSettle.Allowed, settled.Allowed)
		}
		if o, r, act := reservationOf(t, settled); o != ReservationSettledBelow || r != 300 || act != 100 || remaining(settled) != 400 {
			t.Fatalf("a settled: %s %d→%d, remaining %d", o, r, act, remaining(settled))
		}
		if again := reserveCheck(t, c, Input{Holder: "a", Cost: 100, Action: ratelimit.Settle}); again.Allowed {
			t.Fatal("a settled twice")
		} else if o, _, _ := reservationOf(t, again); o != ReservationNothingReserved || remaining(again) != 400 {
			t.Fatalf("a's second settlement: %s, remaining %d", o, remaining(again))
		}
		usage := &policy.Usage{InputTokens: 600, OutputTokens: 100, CachedInputTokens: 50}
		over := reserveCheck(t, c, Input{Holder: "b", Usage: usage, Action: ratelimit.Settle})
		if o, r, act := reservationOf(t, over); !over.Allowed || o != ReservationSettledAbove || r != 500 || act != 700 || remaining(over) != 200 {
			t.Fatalf("b settled: %s %d→%d, remaining %d", o, r, act, remaining(over))
		}
		if never := reserveCheck(t, c, Input{Holder: "never", Cost: 5, Action: ratelimit.Settle}); never.Allowed {
			t.Fatal("a holder that holds nothing settled")
		}
		// A refund leaves a reservation alone: it is settled, not refunded.
		reserveCheck(t, c, Input{Holder: "c", Cost: 100})
		if refund := reserveCheck(t, c, Input{Cost: 100, Action: ratelimit.Refund}); len(refund.Limits) != 0 {
			t.Fatalf("a refund reached a reserve policy's limits: %+v", refund.Limits)
		}
		for outcome, want := range map[ReservationOutcome]float64{
			ReservationReserved: 3, ReservationClamped: 1, ReservationSettledBelow: 1, ReservationSettledAbove: 1, ReservationNothingReserved: 3,
		} {
			if got := testutil.ToFloat64(c.metrics.reservations.WithLabelValues("ns", "p", string(outcome))); got != want {
				t.Errorf("sluice_reservations_total{outcome=%s} = %v, want %v", outcome, got, want)
			}
		}
		for kind, want := range map[ReservationUnits]float64{UnitsReserved: 900, UnitsGivenBack: 200, UnitsTaken: 200} {
			if got := testutil.ToFloat64(c.metrics.reservationUnits.WithLabelValues("ns", "p", string(kind))); got != want {
				t.Errorf("sluice_reservation_units_total{kind=%s} = %v, want %v", kind, got, want)
			}
		}
	})
}

// A settlement reaches the store even when the cache of denials holds a
// denial of its bucket: it gives units back, after which the denial no
// longer stands.
func TestSettlementIsNeverAnsweredFromTheCache(t *testing.T) {
	c := newChecker(t, Options{}, policytest.Compile(t, "ns", "p", tokenBudget),
		policytest.Compile(t, "ns", "plain", "key: global\nlimits: [{name: hour, fixedWindow: {limit: 1, window: 1h}}]"))
	if !reserveCheck(t, c, Input{Policy: "p", Holder: "a", Cost: 500}).Allowed || !reserveCheck(t, c, Input{Policy: "p", Holder: "b", Cost: 500}).Allowed {
		t.Fatal("denied within the budget")
	}
	if reserveCheck(t, c, Input{Policy: "p", Holder: "c", Cost: 10}).Allowed {
		t.Fatal("admitted past the budget")
	}
	settled := reserveCheck(t, c, Input{Policy: "p", Holder: "a", Cost: 0, Parts: []Part{{Request: request(), CostSet: true}}, Action: ratelimit.Settle})
	if !settled.Allowed || settled.Limits[0].Remaining != 500 {
		t.Fatalf("settled %v, remaining %+v", settled.Allowed, settled.Limits)
	}
	if !reserveCheck(t, c, Input{Policy: "p", Holder: "c", Cost: 10}).Allowed {
		t.Fatal("denied after the settlement gave 500 back")
	}
}

// A transport that cannot settle (no holder: the HTTP auth hooks,
// ext_authz) is refused for a reserve policy, as for a concurrency limit.
func TestReserveWithoutAHolderIsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newChecker(t, Options{Metrics: NewMetrics(reg)}, policytest.Compile(t, "ns", "p", tokenBudget))
	_, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()})
	if !errors.Is(err, ErrNoRelease) {
		t.Fatalf("err = %v, want ErrNoRelease", err)
	}
	if got := testutil.ToFloat64(c.metrics.reservations.WithLabelValues("ns", "p", string(ReservationRefused))); got != 1 {
		t.Errorf("refused_no_release = %v", got)
	}
	// A dry run holds nothing: it reads the figures.
	out := reserveCheck(t, c, Input{Action: ratelimit.DryRun})
	if !out.Allowed || out.Limits[0].Remaining != 900 {
		t.Fatalf("dry run: %v %+v", out.Allowed, out.Limits)
	}
}

// A descriptor policy's holder is its descriptor entry: admission and
// settlement name it there; one Sluice cannot track is denied, and its
// settlement changes nothing.
func TestReserveHolderFromTheDescriptor(t *testing.T) {
	c := newChecker(t, Options{}, policytest.Compile(t, "ns", "llm", `
match: {descriptor: [{key: tenant}, {key: request_id}]}
key: "{descriptor:tenant}"
charge: Reserve
reserve: {holder: request_id}
cost: 1000
limits: [{name: month, calendar: {limit: 5000, period: Month, timeZone: Europe/Berlin}}]
`))
	part := func(id string, cost int64, set bool) []Part {
		return []Part{{Request: &policy.Request{Kind: policy.KindDescriptor, Domain: "llm",
			Descriptor: []policy.DescriptorEntry{{Key: "tenant", Value: "acme"}, {Key: "request_id", Value: id}}}, Cost: cost, CostSet: set}}
	}
	if out := reserveCheck(t, c, Input{Parts: part("r1", 0, false)}); !out.Allowed || out.Limits[0].Remaining != 4000 {
		t.Fatalf("admission: %v %+v", out.Allowed, out.Limits)
	}
	if out := reserveCheck(t, c, Input{Parts: part("r1", 0, false)}); out.Allowed {
		t.Fatal("r1's duplicate admitted")
	}
	if out := reserveCheck(t, c, Input{Parts: part("", 10, true)}); out.Allowed || out.Reason != ReasonInvalidHolder {
		t.Fatalf("an empty holder: %v %s", out.Allowed, out.Reason)
	}
	if out := reserveCheck(t, c, Input{Parts: part("", 10, true), Action: ratelimit.Settle}); out.Allowed {
		t.Fatal("an empty holder settled")
	}
	reserveCheck(t, c, Input{Parts: part("r1", 2500, true), Action: ratelimit.Settle}) // the duplicate's
	out := reserveCheck(t, c, Input{Parts: part("r1", 2500, true), Action: ratelimit.Settle})
	if o, r, act := reservationOf(t, out); !out.Allowed || o != ReservationSettledAbove || r != 1000 || act != 2500 || out.Limits[0].Remaining != 2500 {
		t.Fatalf("settled %v: %s %d→%d, %+v", out.Allowed, o, r, act, out.Limits)
	}
}

// An override of a tenant's token budget (RateLimitOverrides, `kubectl
// sluice override`) changes that tenant's limit; reservations and
// settlements work against the overridden number.
func TestReserveUnderAnOverride(t *testing.T) {
	x := overrides.NewIndex(nil)
	x.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "p"},
		map[string]overrides.Entry{"acme": {Key: "acme", Limits: map[string]int64{"month": 5000}, Source: policy.OverrideRuntime}})
	c := newChecker(t, Options{Overrides: x}, policytest.Compile(t, "ns", "p", `
key: '{header:X-Tenant}'
charge: Reserve
reserve: {}
cost: 1000
limits: [{name: month, calendar: {limit: 2000, period: Month, timeZone: Europe/Berlin}}]
`))
	admit := func(tenant, holder string) *Outcome {
		return reserveCheck(t, c, Input{Request: tenantRequest(tenant), Holder: holder})
	}
	for i, want := range []bool{true, true, false} {
		if got := admit("other", fmt.Sprint("o", i)).Allowed; got != want {
			t.Fatalf("other's admission %d: %v, want %v (the policy's 2000)", i, got, want)
		}
	}
	for i := range 5 {
		if out := admit("acme", fmt.Sprint("a", i)); !out.Allowed || out.Limits[0].Limit.Limit.Capacity != 5000 {
			t.Fatalf("acme's admission %d under its override of 5000: %v %+v", i, out.Allowed, out.Limits)
		}
	}
	if admit("acme", "a5").Allowed {
		t.Fatal("acme admitted past its override")
	}
	out := reserveCheck(t, c, Input{Request: tenantRequest("acme"), Holder: "a0", Cost: 10, Action: ratelimit.Settle})
	if !out.Allowed || out.Limits[0].Remaining != 990 {
		t.Fatalf("settled under the override: %v %+v", out.Allowed, out.Limits)
	}
}

// Inspect reports a bucket's live reservations apart from what was spent,
// as they are: without the estimate of the next request it asks about.
func TestInspectReportsReservations(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		c := newChecker(t, Options{Backend: store}, policytest.Compile(t, "ns", "p", tokenBudget))
		reserveCheck(t, c, Input{Holder: "a", Cost: 300})
		reserveCheck(t, c, Input{Holder: "b", Cost: 200})
		reserveCheck(t, c, Input{Holder: "b", Cost: 50, Action: ratelimit.Settle})
		out, err := c.Buckets().Inspect(context.Background(), "ns", "p", "global")
		if err != nil {
			t.Fatal(err)
		}
		if lr := out.Limits[0]; !out.Allowed || lr.Remaining != 650 || lr.Reserved != 300 {
			t.Fatalf("inspect: allowed %v, remaining %d, reserved %d; want 650 and 300 (50 spent)", out.Allowed, lr.Remaining, lr.Reserved)
		}
	})
}

// TestReserveShadow: a shadow policy with charge Reserve reserves what
// fits as an enforcing one does; a request its budget would deny is let
// through, reserving and taking nothing, so that its settlement changes
// nothing; a holder's duplicate is let through too, and its settlement
// never settles the original's reservation.
func TestReserveShadow(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		c := newChecker(t, Options{Backend: store, Metrics: NewMetrics(prometheus.NewRegistry())}, policytest.Compile(t, "ns", "p", "mode: Shadow\n"+tokenBudget))
		remaining := func(out *Outcome) int64 { return out.Limits[0].Remaining }
		a := reserveCheck(t, c, Input{Holder: "a", Cost: 500})
		b := reserveCheck(t, c, Input{Holder: "b", Cost: 400})
		if o, r, _ := reservationOf(t, b); !a.Allowed || !b.Allowed || o != ReservationReserved || r != 400 || remaining(b) != 100 {
			t.Fatalf("a %v, b %v: %s %d, remaining %d; want both reserved, 100 left", a.Allowed, b.Allowed, o, r, remaining(b))
		}
		over := reserveCheck(t, c, Input{Holder: "c", Cost: 200})
		if o, _, _ := reservationOf(t, over); !over.Allowed || over.Limits[0].Allowed || o != "" || remaining(over) != 100 {
			t.Fatalf("over the budget: allowed %v, shadow denied %v, %q, remaining %d; want let through, counted denied, nothing reserved, 100 left",
				over.Allowed, !over.Limits[0].Allowed, o, remaining(over))
		}
		if s := reserveCheck(t, c, Input{Holder: "c", Cost: 200, Action: ratelimit.Settle}); s.Allowed || remaining(s) != 100 {
			t.Fatalf("the settlement of a request the shadow budget denied: settled %v, remaining %d; want nothing changed", s.Allowed, remaining(s))
		}
		if dup := reserveCheck(t, c, Input{Holder: "a", Cost: 50}); !dup.Allowed || remaining(dup) != 100 {
			t.Fatalf("a's duplicate: allowed %v, remaining %d; want let through, taking nothing", dup.Allowed, remaining(dup))
		}
		dupSettle := reserveCheck(t, c, Input{Holder: "a", Cost: 1, Action: ratelimit.Settle})
		settled := reserveCheck(t, c, Input{Holder: "a", Cost: 100, Action: ratelimit.Settle})
		if dupSettle.Allowed || !settled.Allowed || remaining(settled) != 500 {
			t.Fatalf("duplicate's settlement settled %v, a's %v, remaining %d; want only a's, 500 left", dupSettle.Allowed, settled.Allowed, remaining(settled))
		}
	})
}

// TestSettlementPriceErrorNamesThePolicy: a usage the policy's pricing
// expression cannot price (NaN) refuses the settlement naming the policy
// and its field, and changes nothing: the reservation settles afterwards.
func TestSettlementPriceErrorNamesThePolicy(t *testing.T) {
	c := newChecker(t, Options{}, policytest.Compile(t, "ns", "p",
		"key: global\ncharge: Reserve\nreserve: {pricing: {expression: 'double(inputTokens) / double(outputTokens)'}}\ncost: 100\nlimits: [{name: hour, fixedWindow: {limit: 1000, window: 1h}}]"))
	reserveCheck(t, c, Input{Holder: "a"})
	_, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Holder: "a", Usage: &policy.Usage{}, Action: ratelimit.Settle})
	if err == nil || !strings.Contains(err.Error(), "policy ns/p") || !strings.Contains(err.Error(), "spec.reserve.pricing.expression") || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("a usage priced NaN: %v, want an error naming policy ns/p, spec.reserve.pricing.expression and NaN", err)
	}
	if s := reserveCheck(t, c, Input{Holder: "a", Cost: 40, Action: ratelimit.Settle}); !s.Allowed || s.Limits[0].Remaining != 960 {
		t.Fatalf("the settlement after the refused one: settled %v, %d left; want settled, 960 left", s.Allowed, s.Limits[0].Remaining)
	}
}

// TestReserveDuplicateDeniedBeforeTheStore: a holder's duplicate denied
// before the store (another policy's key missing) is remembered by its
// reservation all the same, so its settlement never settles the
// original's; the holder's last settlement does. Over the memory store,
// Redis and a lease store.
func TestReserveDuplicateDeniedBeforeTheStore(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		c := newChecker(t, Options{Backend: store}, policytest.Compile(t, "ns", "p", tokenBudget),
			policytest.Compile(t, "ns", "plan", "key: '{header:X-Plan}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 100000, window: 1h}}]"))
		withPlan := request()
		withPlan.Header.Set("X-Plan", "pro")
		if a := reserveCheck(t, c, Input{Holder: "a", Cost: 300, Request: withPlan}); !a.Allowed {
			t.Fatal("a denied")
		}
		if dup := reserveCheck(t, c, Input{Holder: "a", Cost: 300}); dup.Allowed || dup.Reason != ReasonMissingKey {
			t.Fatalf("a's duplicate without X-Plan: allowed %v, %s; want denied for the missing key", dup.Allowed, dup.Reason)
		}
		budget := func(out *Outcome) LimitResult {
			for _, l := range out.Limits {
				if l.Policy.Name == "p" {
					return l
				}
			}
			t.Fatalf("no limit of p in %+v", out.Limits)
			return LimitResult{}
		}
		dupSettle := reserveCheck(t, c, Input{Holder: "a", Cost: 0, Action: ratelimit.Settle, Request: withPlan})
		if dupSettle.Allowed || budget(dupSettle).Remaining != 700 {
			t.Fatalf("the duplicate's settlement: settled %v, %d left; want nothing settled, 700 left", dupSettle.Allowed, budget(dupSettle).Remaining)
		}
		settled := reserveCheck(t, c, Input{Holder: "a", Cost: 100, Action: ratelimit.Settle, Request: withPlan})
		if !settled.Allowed || budget(settled).Remaining != 900 {
			t.Fatalf("a's settlement: settled %v, %d left; want settled, 900 left", settled.Allowed, budget(settled).Remaining)
		}
	})
}
