package check

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// An outcome carries each part's verdict: a part is denied only by an
// enforced limit of its own (a shadow denial denies nothing), and reports
// its own tightest limit, an enforced one before a shadow one; a denial
// from the cache of denials reports the cached limit alone.
func TestPartsCarryTheirVerdicts(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "route", "match: {descriptor: [{key: route}]}\nkey: '{descriptor:route}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "client", "match: {descriptor: [{key: client}]}\nkey: '{descriptor:client}'\nlimits: [{name: wide, fixedWindow: {limit: 100, window: 1h}}, {name: narrow, fixedWindow: {limit: 5, window: 1h}}]"),
		policytest.Compile(t, "ns", "client-trial", "mode: Shadow\nmatch: {descriptor: [{key: client}]}\nkey: '{descriptor:client}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "watch", "mode: Shadow\nmatch: {descriptor: [{key: watch}]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	check := func() *Outcome {
		t.Helper()
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{
			descriptor("route", "login"), descriptor("client", "a"), descriptor("watch", "x"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	type want struct {
		denied          bool
		policy, limit   string // "" for no reporting limit
		cached, allowed bool
	}
	verdicts := func(name string, out *Outcome, wants ...want) {
		t.Helper()
		for i, w := range wants {
			v := out.Part(i)
			got := want{denied: v.Denied}
			if lr := v.Reporting; lr != nil {
				got.policy, got.limit, got.cached, got.allowed = lr.Policy.Name, lr.Limit.Name, lr.Cached, lr.Allowed
				if lr.Part != i {
					t.Errorf("%s: part %d reports a limit of part %d", name, i, lr.Part)
				}
			}
			if got != w {
				t.Errorf("%s: part %d %+v, want %+v", name, i, got, w)
			}
		}
	}

	out := check()
	if !out.Allowed {
		t.Fatal("first request denied")
	}
	verdicts("first", out,
		want{policy: "route", limit: "l", allowed: true},
		want{policy: "client", limit: "narrow", allowed: true},
		want{policy: "watch", limit: "l", allowed: true})

	out = check() // the route's one unit is spent; the shadow limits would deny
	if out.Allowed || out.Reason != ReasonLimited {
		t.Fatalf("second request: allowed %v, %s; want rate limited", out.Allowed, out.Reason)
	}
	if r := out.Reporting(); r == nil || r.Policy.Name != "route" {
		t.Errorf("second request reports %+v, want the route's limit", r)
	}
	verdicts("second", out,
		want{denied: true, policy: "route", limit: "l"},
		want{policy: "client", limit: "narrow", allowed: true},
		want{policy: "watch", limit: "l"})

	out = check() // the route's denial is remembered: nothing read from the store
	if out.Allowed || len(out.Limits) != 1 || !out.Limits[0].Cached {
		t.Fatalf("third request: allowed %v, limits %+v; want denied from the cache of denials", out.Allowed, out.Limits)
	}
	verdicts("third", out,
		want{denied: true, policy: "route", limit: "l", cached: true},
		want{},
		want{})

	// A request without parts is its own part 0, reporting what the
	// whole answer reports.
	single, err := c.Check(context.Background(), Input{Namespace: "ns", Request: descriptor("client", "b").Request})
	if err != nil {
		t.Fatal(err)
	}
	if v := single.Part(0); v.Denied || v.Reporting == nil || v.Reporting != single.Reporting() || v.Reporting.Limit.Name != "narrow" {
		t.Errorf("request without parts: part 0 %+v, the answer reports %+v; want both the client's narrow limit", v, single.Reporting())
	}
}

// A part is denied by its own policies too: the one whose missing key
// denied, those whose failureMode Closed answered with the store away,
// and an enforced limit of 0; the other parts are not.
func TestPartsDeniedByTheirPolicies(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	failing := &countingStore{Store: storetest.Memory(t, clock.Now)}
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: failing}, Now: clock.Now},
		policytest.Compile(t, "ns", "keyed", "match: {descriptor: [{key: keyed}]}\nkey: '{descriptor:user}'\nonMissingKey: Deny\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
		policytest.Compile(t, "ns", "closed", "failureMode: Closed\nmatch: {descriptor: [{key: closed}]}\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
		policytest.Compile(t, "ns", "open", "match: {descriptor: [{key: open}]}\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
	)
	zero, err := policy.DescriptorLimit("ns", "hour", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	check := partsChecker(t, c)
	denied := func(name string, out *Outcome, want ...bool) {
		t.Helper()
		for i, w := range want {
			if got := out.Part(i).Denied; got != w {
				t.Errorf("%s: part %d denied %v, want %v", name, i, got, w)
			}
		}
	}

	out := check(descriptor("open", "x"), descriptor("keyed", "x"))
	if out.Allowed || out.Reason != ReasonMissingKey {
		t.Fatalf("missing key: allowed %v, %s", out.Allowed, out.Reason)
	}
	denied("missing key", out, false, true)

	blocked := descriptor("open", "x")
	blocked.Policies = []*policy.Policy{zero}
	out = check(descriptor("open", "x"), blocked)
	if out.Allowed || out.Reason != ReasonLimited {
		t.Fatalf("limit of 0: allowed %v, %s", out.Allowed, out.Reason)
	}
	denied("limit of 0", out, false, true)
	if v := out.Part(1); v.Reporting == nil || v.Reporting.Policy != zero {
		t.Errorf("limit of 0: part 1 reports %+v, want the limit of 0", v.Reporting)
	}

	failing.err = errors.New("redis: connection refused")
	out = check(descriptor("open", "x"), descriptor("closed", "x"))
	if out.Allowed || !out.Degraded || out.Reporting() != nil {
		t.Fatalf("store away: allowed %v, degraded %v, reporting %+v; want denied by the failure mode, no figures", out.Allowed, out.Degraded, out.Reporting())
	}
	denied("store away", out, false, true)
	if out = check(descriptor("open", "x")); !out.Allowed {
		t.Fatal("store away: failureMode Open denied")
	}
	denied("store away, open", out, false)
}
