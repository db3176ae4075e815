package check

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// descriptor is one part of a rate limit service request.
func descriptor(kv ...string) Part {
	r := &policy.Request{Kind: policy.KindDescriptor, Domain: "edge"}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptor = append(r.Descriptor, policy.DescriptorEntry{Key: kv[i], Value: kv[i+1]})
	}
	return Part{Request: r}
}

// partsChecker checks requests of parts in namespace "ns" with c, failing
// the test on an error.
func partsChecker(t *testing.T, c *Checker) func(parts ...Part) *Outcome {
	return func(parts ...Part) *Outcome {
		t.Helper()
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Parts: parts})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func withCost(p Part, cost int64) Part {
	p.Cost, p.CostSet = cost, true
	return p
}

func TestPartsAreDecidedAllOrNothing(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "per-client", "match: {descriptor: [{key: client}]}\nkey: '{descriptor:client}'\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"),
		policytest.Compile(t, "ns", "route", "match: {descriptor: [{key: route, value: login}]}\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
	)
	check := partsChecker(t, c)
	for i := 0; i < 4; i++ {
		out := check(descriptor("client", "a"), descriptor("route", "login"))
		if want := i < 2; out.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i, out.Allowed, want)
		}
		for _, lr := range out.Limits {
			if want := map[string]int{"per-client": 0, "route": 1}[lr.Policy.Name]; lr.Part != want {
				t.Errorf("request %d: %s's limit reported for part %d, want %d", i, lr.Policy.Name, lr.Part, want)
			}
		}
	}
	// The denied requests charged the client's bucket nothing.
	out := check(descriptor("client", "a"))
	if got := out.Limits[0].Remaining; !out.Allowed || got != 7 {
		t.Errorf("client a: allowed %v with %d remaining, want allowed with 7 (10 - 2 admitted - this one)", out.Allowed, got)
	}
	// A descriptor no policy matches takes no part.
	if out := check(descriptor("other", "x")); !out.Allowed || len(out.Policies) != 0 {
		t.Errorf("unmatched descriptor: allowed %v, %d policies; want allowed, none", out.Allowed, len(out.Policies))
	}
}

func TestPartsSharingABucketAreChargedTogether(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "any", "match: {domain: edge}\nkey: '{descriptor:user}'\nlimits: [{name: l, fixedWindow: {limit: 5, window: 1h}}]"),
	)
	// Two descriptors of one request name the same bucket (user u): one
	// entry is charged 2 + 1, and both parts read its figures.
	out, err := c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{
		withCost(descriptor("user", "u", "a", "1"), 2), descriptor("user", "u", "b", "2"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Allowed || len(out.Limits) != 2 || out.Limits[0].Remaining != 2 || out.Limits[1].Remaining != 2 {
		t.Fatalf("got allowed %v, limits %+v; want allowed, both parts with 2 remaining", out.Allowed, out.Limits)
	}
	// A cost of 0 checks without counting; 3 more do not fit.
	out, _ = c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{withCost(descriptor("user", "u"), 0)}})
	if !out.Allowed || out.Limits[0].Remaining != 2 {
		t.Errorf("cost 0: allowed %v, remaining %d; want allowed, 2 (nothing counted)", out.Allowed, out.Limits[0].Remaining)
	}
	out, _ = c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{withCost(descriptor("user", "u"), 3)}})
	if out.Allowed {
		t.Errorf("cost 3 with 2 remaining was allowed")
	}
}

func TestHTTPAndDescriptorPoliciesKeepApart(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "http", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "rls", "match: {domain: edge}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	for i := 0; i < 2; i++ {
		httpOut, _ := c.Check(context.Background(), Input{Namespace: "ns", Request: request()})
		rlsOut, _ := c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{descriptor("k", "v")}})
		if len(httpOut.Policies) != 1 || httpOut.Policies[0].Policy.Name != "http" || len(rlsOut.Policies) != 1 || rlsOut.Policies[0].Policy.Name != "rls" {
			t.Fatalf("HTTP matched %v, descriptor matched %v; want each its own policy only", httpOut.Policies, rlsOut.Policies)
		}
		if want := i == 0; httpOut.Allowed != want || rlsOut.Allowed != want {
			t.Errorf("round %d: HTTP allowed %v, descriptor allowed %v; want %v", i, httpOut.Allowed, rlsOut.Allowed, want)
		}
	}
}

// A policy with charge Always counts reports that do not fit (the tokens
// were spent), and the deny cache never answers a report in place of the
// store: each one reaches the bucket. Token bucket 1000, 100 back a second.
func TestReportsChargedAlwaysReachTheStore(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "tokens", "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\ncharge: Always\nlimits: [{name: t, tokenBucket: {capacity: 1000, refillRate: 100, refillInterval: 1s}}]"))
	report := func(hits int64) *Outcome {
		t.Helper()
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Parts: []Part{withCost(descriptor("user", "alice"), hits)}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := report(600); !out.Allowed || out.Limits[0].Remaining != 400 {
		t.Fatalf("600 of 1000: allowed %v, remaining %d; want allowed, 400", out.Allowed, out.Limits[0].Remaining)
	}
	// 500 with 400 left: denied, and counted (100 in debt), then again
	// (600 in debt): the second must not be answered by the cached denial.
	for i, want := range []time.Duration{6 * time.Second, 11 * time.Second} {
		out := report(500)
		if out.Allowed || out.Limits[0].Cached {
			t.Fatalf("report %d of 500 over the limit: allowed %v, cached %v; want denied by the store", i, out.Allowed, out.Limits[0].Cached)
		}
		if out.RetryAfter != want {
			t.Errorf("report %d of 500: retry after %s, want %s (the debt and the cost refilled)", i, out.RetryAfter, want)
		}
	}
	// A check of cost 0 waits for the debt: 600 tokens, 6 seconds.
	if out := report(0); out.Allowed || out.RetryAfter != 6*time.Second {
		t.Fatalf("check of cost 0 in debt: allowed %v, retry after %s; want denied, 6s", out.Allowed, out.RetryAfter)
	}
	clock.now = clock.now.Add(6 * time.Second)
	if out := report(0); !out.Allowed {
		t.Fatalf("check of cost 0 once the debt is refilled: denied, want allowed")
	}
}

// A part's own policies decide it instead of the namespace's that match
// it, in the same all-or-nothing call as the other parts.
func TestPartPoliciesReplaceTheMatchingOnes(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "route", "match: {descriptor: [{key: route}]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "client", "match: {descriptor: [{key: client}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"))
	own := func(n int64) Part {
		p := descriptor("route", "login")
		limit, err := policy.DescriptorLimit("ns", "hour", time.Hour, n)
		if err != nil {
			t.Fatal(err)
		}
		p.Policies = []*policy.Policy{limit}
		return p
	}
	check := partsChecker(t, c)
	for i := range 4 {
		out := check(own(3), descriptor("client", "a"))
		if want := i < 3; out.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v (3 an hour replace the route policy's 1)", i, out.Allowed, want)
		}
		for _, pr := range out.Policies {
			if pr.Part == 0 && pr.Policy.Name != policy.DescriptorLimitPolicy {
				t.Fatalf("part 0 matched %s, want only its own limit", pr.Policy.Name)
			}
		}
	}
	// The denied request charged the client nothing: 10 - 3 - this one.
	if out := check(descriptor("client", "a")); out.Limits[0].Remaining != 6 {
		t.Errorf("client: %d remaining, want 6", out.Limits[0].Remaining)
	}
	// The denial of 3 an hour is cached; the same bucket with 5 an hour
	// is not denied by it: the store counts 3 of 5.
	if out := check(own(3)); out.Allowed || !out.Limits[0].Cached {
		t.Fatalf("3 an hour again: allowed %v, cached %v; want denied from the cache", out.Allowed, out.Limits[0].Cached)
	}
	if out := check(own(5)); !out.Allowed || out.Limits[0].Remaining != 1 {
		t.Errorf("5 an hour on the same bucket: allowed %v, %d remaining; want allowed, 1 (3 counted + this one)", out.Allowed, out.Limits[0].Remaining)
	}
}

// A part's own limit of 0 denies a request of any cost before the store
// is asked, charging the other parts nothing; a check of cost 0 passes.
// Both report 0 remaining and the end of the window on the clock.
func TestPartLimitOfZero(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000+600, 0)} // 10 minutes into an hour
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "route", "match: {descriptor: [{key: route}]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "client", "match: {descriptor: [{key: client}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"))
	zero, err := policy.DescriptorLimit("ns", "hour", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	blocked := func(cost int64) Part {
		p := withCost(descriptor("route", "login"), cost)
		p.Policies = []*policy.Policy{zero}
		return p
	}
	check := partsChecker(t, c)
	zeroFigures := func(name string, lr LimitResult, allowed bool) {
		t.Helper()
		want := ratelimit.Result{Allowed: allowed, Reset: 50 * time.Minute}
		if !allowed {
			want.RetryAfter = ratelimit.Never
		}
		if lr.Policy != zero || lr.Part != 0 || lr.Result != want {
			t.Errorf("%s: limit of 0 reported %s part %d %+v, want part 0 %+v", name, lr.Policy, lr.Part, lr.Result, want)
		}
	}

	out := check(blocked(1), descriptor("client", "a"))
	if out.Allowed || out.Reason != ReasonLimited || out.RetryAfter != ratelimit.Never || out.Decider != zero || len(out.Limits) != 1 || out.Tightest != 0 {
		t.Fatalf("cost 1: allowed %v, %s, retry %v, decider %s, %d limits, tightest %d; want denied by the limit of 0 alone, never to retry", out.Allowed, out.Reason, out.RetryAfter, out.Decider, len(out.Limits), out.Tightest)
	}
	zeroFigures("cost 1", out.Limits[0], false)

	out = check(blocked(0), descriptor("client", "a"))
	if !out.Allowed || out.Reason != ReasonAllowed || len(out.Limits) != 2 || out.Tightest != 0 || out.Limits[1].Remaining != 9 {
		t.Fatalf("cost 0: allowed %v, %s, limits %+v, tightest %d; want allowed, the client charged its first (9 of 10 left)", out.Allowed, out.Reason, out.Limits, out.Tightest)
	}
	zeroFigures("cost 0", out.Limits[0], true)
	if out := check(blocked(0)); !out.Allowed || out.Reason != ReasonAllowed || len(out.Limits) != 1 {
		t.Errorf("cost 0 alone: allowed %v, %s, %d limits; want allowed by the limit of 0", out.Allowed, out.Reason, len(out.Limits))
	}

	// Beside a denial the cache of denials answers, the answer reports
	// the cached denial.
	check(descriptor("route", "x"))
	check(descriptor("route", "x"))
	out = check(blocked(0), descriptor("route", "x"))
	if out.Allowed || len(out.Limits) != 2 || !out.Limits[1].Cached || out.Tightest != 1 {
		t.Errorf("beside a cached denial: allowed %v, limits %+v, tightest %d; want denied, reporting the cached denial", out.Allowed, out.Limits, out.Tightest)
	}
}
