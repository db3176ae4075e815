package check

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

func tenantRequest(tenant string) *policy.Request {
	r := request()
	r.Header.Set("X-Tenant", tenant)
	return r
}

// An override changes the numbers of its key only; the result says what
// the policy's number was and where the override came from.
func TestOverrideChangesOneKeysNumbers(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	x := overrides.NewIndex(nil)
	id := overrides.PolicyID{Namespace: "ns", Name: "p"}
	expires := clock.now.Add(time.Hour)
	x.SetRuntime(id, map[string]overrides.Entry{"acme": {Key: "acme", Limits: map[string]int64{"l": 4}, Source: policy.OverrideRuntime, SetBy: "alice", Expires: &expires}})
	c := newChecker(t, Options{Now: clock.Now, Overrides: x},
		policytest.Compile(t, "ns", "p", "key: '{header:X-Tenant}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	allowed := func(tenant string) int {
		n := 0
		for range 10 {
			out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: tenantRequest(tenant)})
			if err != nil {
				t.Fatal(err)
			}
			if out.Allowed {
				n++
			}
		}
		return n
	}
	if got := allowed("acme"); got != 4 {
		t.Fatalf("acme allowed %d, want its override's 4", got)
	}
	if got := allowed("other"); got != 2 {
		t.Fatalf("other allowed %d, want the policy's 2", got)
	}
	out, _ := c.Check(context.Background(), Input{Namespace: "ns", Request: tenantRequest("acme")})
	lr := out.Reporting()
	if lr.Limit.Limit.Capacity != 4 || lr.PolicyQuota() != 2 || lr.Override == nil || lr.Override.Source != policy.OverrideRuntime || lr.Override.SetBy != "alice" {
		t.Fatalf("limit result %+v, override %+v", lr, lr.Override)
	}
	// At its expiry, the policy's numbers apply again (acme used 4 of 2).
	clock.Advance(time.Hour)
	out, _ = c.Check(context.Background(), Input{Namespace: "ns", Request: tenantRequest("acme")})
	if lr := out.Reporting(); lr.Override != nil || lr.Limit.Limit.Capacity != 2 {
		t.Fatalf("after expiry: %+v", lr)
	}
}

// Decisions under overrides count under the policy's limit: the counts
// keep one entry for it, however many key values have overrides.
func TestOverriddenDecisionsCountUnderThePolicysLimit(t *testing.T) {
	x := overrides.NewIndex(nil)
	entries := map[string]overrides.Entry{}
	for i := range 10 {
		k := fmt.Sprintf("tenant-%d", i)
		entries[k] = overrides.Entry{Key: k, Limits: map[string]int64{"l": 5}, Source: policy.OverrideRuntime}
	}
	x.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "p"}, entries)
	tally := NewTally(nil)
	c := newChecker(t, Options{Overrides: x, Observer: tally},
		policytest.Compile(t, "ns", "p", "key: '{header:X-Tenant}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	for i := range 10 {
		for range 7 { // 5 allowed, a denial by the store, one from the cache
			if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: tenantRequest(fmt.Sprintf("tenant-%d", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	held := 0
	tally.counts.byPtr.Range(func(_, _ any) bool { held++; return true })
	if held != 1 {
		t.Errorf("the counts hold %d limits, want 1 (the policy's)", held)
	}
	if got := tally.Counts(); len(got) != 1 || got[0].Allowed != 50 || got[0].Denied != 20 {
		t.Errorf("counts %+v, want 50 allowed and 20 denied under ns/p/l", got)
	}
}

// A denial cached under the old numbers is not answered once an override
// gives the key room.
func TestOverrideLeavesNoStaleCachedDenial(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	x := overrides.NewIndex(nil)
	c := newChecker(t, Options{Now: clock.Now, Overrides: x},
		policytest.Compile(t, "ns", "p", "key: '{header:X-Tenant}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	check := func() *Outcome {
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: tenantRequest("acme")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	check()
	check()
	if out := check(); out.Allowed || !out.Limits[0].Cached {
		t.Fatalf("third check: allowed %v, cached %v; want a cached denial", out.Allowed, out.Limits[0].Cached)
	}
	x.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "p"}, map[string]overrides.Entry{"acme": {Key: "acme", Limits: map[string]int64{"l": 5}, Source: policy.OverrideRuntime}})
	if out := check(); !out.Allowed || out.Limits[0].Cached {
		t.Fatalf("after the override: allowed %v, cached %v", out.Allowed, out.Limits[0].Cached)
	}
}

// BenchmarkCheckOverrides: one check of a one-limit policy on the memory
// store without overrides, with an index where the policy has none (some
// other policy has), and with the key's override among 100,000 of the
// policy. Compare the three: the lookup is one map read per policy.
func BenchmarkCheckOverrides(b *testing.B) {
	p := policytest.Compile(b, "ns", "p", "key: '{header:X-Tenant}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]")
	withOthers := overrides.NewIndex(nil)
	withOthers.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "other"}, map[string]overrides.Entry{"a": {Key: "a", Limits: map[string]int64{"l": 5}}})
	many := overrides.NewIndex(nil)
	entries := make(map[string]overrides.Entry, overrides.MaxPerPolicy)
	for i := range overrides.MaxPerPolicy {
		k := fmt.Sprintf("tenant-%06d", i)
		entries[k] = overrides.Entry{Key: k, Limits: map[string]int64{"l": 999_999_999}, Source: policy.OverrideRuntime}
	}
	many.SetRuntime(overrides.PolicyID{Namespace: "ns", Name: "p"}, entries)
	for _, bc := range []struct {
		name string
		x    Overrides
	}{{"none", nil}, {"policy-without", withOthers}, {"key-among-100k", many}} {
		b.Run(bc.name, func(b *testing.B) {
			o := Options{}
			if bc.x != nil {
				o.Overrides = bc.x
			}
			c := newChecker(b, o, p)
			in, out := Input{Namespace: "ns", Request: tenantRequest("tenant-004242")}, &Outcome{}
			for b.Loop() {
				if err := c.CheckInto(context.Background(), in, out); err != nil || !out.Allowed {
					b.Fatalf("allowed %v, err %v", out.Allowed, err)
				}
			}
		})
	}
}
