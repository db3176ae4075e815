package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// namespacePolicies are n policies of ns without a match (every request
// meets all of them), policy i with limits(i) fixed windows of limit an
// hour, except that the last limit of the last policy admits last.
func namespacePolicies(t testing.TB, ns string, n int, limits func(i int) int, limit, last int) []*policy.Policy {
	t.Helper()
	ps := make([]*policy.Policy, n)
	for i := range n {
		var spec strings.Builder
		spec.WriteString("key: '{client_ip}'\nlimits:\n")
		for l := range limits(i) {
			limit := limit
			if i == n-1 && l == limits(i)-1 {
				limit = last
			}
			fmt.Fprintf(&spec, "- {name: l%d, fixedWindow: {limit: %d, window: 1h}}\n", l, limit)
		}
		ps[i] = policytest.Compile(t, ns, fmt.Sprintf("p%04d", i), spec.String())
	}
	return ps
}

// boundStores are the stores a namespace's checks run against: the memory
// store and a real redis-server.
func boundStores(t testing.TB) map[string]func(t testing.TB) ratelimit.Backend {
	srv := redistest.Start(t)
	return map[string]func(t testing.TB) ratelimit.Backend{
		"memory": func(t testing.TB) ratelimit.Backend { return storetest.Memory(t, nil).Backend() },
		"redis": func(t testing.TB) ratelimit.Backend {
			if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return storetest.Redis(t, srv.Addr()).Backend()
		},
	}
}

// TestManyMatchingLimits: a namespace whose policies give one request more
// limits than one store call takes (60 policies of 5 limits without a
// match: 300) is decided, all or nothing; so is a namespace of 1,000
// policies of 1 to 8 limits (4,500).
func TestManyMatchingLimits(t *testing.T) {
	for name, newStore := range boundStores(t) {
		for _, c := range []struct {
			policies int
			limits   func(int) int
		}{
			{60, func(int) int { return 5 }},
			{1000, func(i int) int { return 1 + i%8 }},
		} {
			t.Run(fmt.Sprintf("%s/%d policies", name, c.policies), func(t *testing.T) {
				ps := namespacePolicies(t, "ns", c.policies, c.limits, 3, 1)
				want := 0
				for i := range c.policies {
					want += c.limits(i)
				}
				clock := &fakeClock{now: time.Now()}
				checker := newChecker(t, Options{Backend: newStore(t), Now: clock.Now}, ps...)
				check := func() *Outcome {
					t.Helper()
					// A deadline for a loaded machine: the store's decision
					// is what this test reads, not the failure mode's.
					checker.timeout = 10 * time.Second
					out, err := checker.Check(context.Background(), Input{Namespace: "ns", Request: request()})
					if err != nil {
						t.Fatalf("check of %d limits: %v", want, err)
					}
					if out.Degraded {
						t.Fatalf("check of %d limits answered by the failure mode: %v", want, out.StoreErr)
					}
					return out
				}
				out := check()
				if !out.Allowed || len(out.Limits) != want || out.Limits[0].Remaining != 2 {
					t.Fatalf("first check: allowed %v, %d limits (want %d), first remaining %d", out.Allowed, len(out.Limits), want, out.Limits[0].Remaining)
				}
				out = check()
				if out.Allowed || out.Decider.Name != ps[len(ps)-1].Name {
					t.Fatalf("second check: allowed %v, decider %v; want denied by the last policy", out.Allowed, out.Decider)
				}
				dry, err := checker.Check(context.Background(), Input{Namespace: "ns", Policy: ps[0].Name, Request: request(), Action: ratelimit.DryRun})
				if err != nil || dry.Limits[0].Remaining != 1 {
					t.Fatalf("first policy after a denied check: %v, remaining %d; want 1 (2 less one for this dry run): nothing consumed by the denial", err, dry.Limits[0].Remaining)
				}
			})
		}
	}
}

// TestTooManyLimits: a request that meets more limits than one check
// evaluates (ratelimit.MaxEntries) is refused with ErrTooManyLimits, which
// names the bound, before the store is asked: the breaker stays closed and
// the namespace's other requests are decided.
func TestTooManyLimits(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ps := namespacePolicies(t, "ns", ratelimit.MaxEntries/8+1, func(int) int { return 8 }, 3, 3)
	checker := newChecker(t, Options{Now: clock.Now}, ps...)
	for range 10 {
		_, err := checker.Check(context.Background(), Input{Namespace: "ns", Request: request()})
		if !errors.Is(err, ErrTooManyLimits) || !strings.Contains(err.Error(), fmt.Sprint(ratelimit.MaxEntries)) {
			t.Fatalf("check of %d limits: %v; want ErrTooManyLimits naming the bound %d", 8*len(ps), err, ratelimit.MaxEntries)
		}
	}
	if s := checker.Breaker().State(); s != BreakerClosed {
		t.Fatalf("breaker %s", s)
	}
	out, err := checker.Check(context.Background(), Input{Namespace: "ns", Policy: ps[0].Name, Request: request()})
	if err != nil || !out.Allowed {
		t.Fatalf("one policy of the namespace: %v, %+v", err, out)
	}
}

// BenchmarkManyPolicies: one check of a namespace whose 1 or 1,000
// policies (3 limits each, no match) all apply, on the memory store and a
// local redis-server, one check at a time. Compare the two per store: a
// check costs in proportion to the limits it meets (ratelimit.MaxCallEntries
// a Redis call, a dry run and a consuming round once they take several).
func BenchmarkManyPolicies(b *testing.B) {
	stores := boundStores(b)
	for _, name := range []string{"memory", "redis"} {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/policies=%d", name, n), func(b *testing.B) {
				ps := namespacePolicies(b, "ns", n, func(int) int { return 3 }, 1_000_000_000, 1_000_000_000)
				checker := newChecker(b, Options{Backend: stores[name](b), Timeout: 10 * time.Second}, ps...)
				in, out := Input{Namespace: "ns", Request: request()}, &Outcome{}
				b.ResetTimer()
				for b.Loop() {
					if err := checker.CheckInto(context.Background(), in, out); err != nil || !out.Allowed || out.Degraded {
						b.Fatalf("allowed %v, degraded %v, err %v", out.Allowed, out.Degraded, err)
					}
				}
			})
		}
	}
}
