package check

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func request() *policy.Request {
	return &policy.Request{Method: "GET", Host: "h", Path: "/", Header: http.Header{}, ClientIP: netip.MustParseAddr("192.0.2.1")}
}

// newChecker is this package's checktest.New (which imports check, so
// these tests cannot): a checker made with o, over an in-memory store on
// o.Now when o.Backend has no store, closed when the test ends, deciding
// by policies when o.Source is nil, observed when o.Observer is nil as
// the stack's is (standardObservers).
func newChecker(t testing.TB, o Options, policies ...*policy.Policy) *Checker {
	t.Helper()
	if o.Backend.Store == nil {
		o.Backend = storetest.Memory(t, o.Now).Backend()
	}
	if o.Observer == nil {
		o.Observer = standardObservers(o, NewTally(o.Metrics))
	}
	if o.Source == nil {
		o.Source = NewStaticSource(policies...)
	}
	return New(o)
}

// standardObservers are the observers checkstack gives every checker: t
// counts, and the bans checks issue are recorded when the store keeps an
// index of them.
func standardObservers(o Options, t *Tally) Observer {
	if o.Backend.BanIndex == nil {
		return t
	}
	return Observers{t, RecordBans(o.Backend.BanIndex, nil)}
}

func TestAllOrNothingAcrossPolicies(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now},
		policytest.Compile(t, "ns", "a-wide", "key: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"),
		policytest.Compile(t, "ns", "b-narrow", "key: global\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
	)
	for i := 0; i < 5; i++ {
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; out.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i, out.Allowed, want)
		}
	}
	// The wide policy counted only the two admitted requests.
	out, _ := c.Check(context.Background(), Input{Namespace: "ns", Policy: "a-wide", Request: request(), Action: ratelimit.DryRun})
	if got := out.Limits[0].Remaining; got != 97 {
		t.Fatalf("wide policy remaining %d after 2 admitted (dry run reports as if consumed): want 97", got)
	}
}

func TestTightestLimitAndRetryAfter(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now}, policytest.Compile(t, "ns", "p", `
key: global
limits:
- {name: burst, tokenBucket: {capacity: 3, refillRate: 1, refillInterval: 10s}}
- {name: minute, fixedWindow: {limit: 4, window: 1m}}
`))
	check := func() *Outcome {
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := check()
	if l := out.Limits[out.Tightest]; l.Limit.Name != "burst" || l.Remaining != 2 {
		t.Fatalf("tightest after 1: %s remaining %d, want burst 2", l.Limit.Name, l.Remaining)
	}
	check()
	check()
	out = check() // burst empty: retry in 10s
	if out.Allowed || out.RetryAfter != 10*time.Second || out.Limits[out.Tightest].Limit.Name != "burst" {
		t.Fatalf("4th: allowed %v retry %s tightest %s", out.Allowed, out.RetryAfter, out.Limits[out.Tightest].Limit.Name)
	}
	clock.Advance(10 * time.Second)
	out = check() // burst refilled one; minute window now at 4 of 4
	if !out.Allowed {
		t.Fatal("after the refill: denied")
	}
	clock.Advance(10 * time.Second)
	out = check() // burst has a token; the minute window is full until 60s after its start
	if out.Allowed || out.Limits[out.Tightest].Limit.Name != "minute" || out.RetryAfter != 40*time.Second {
		t.Fatalf("6th: allowed %v retry %s tightest %s; want the minute window, 40s", out.Allowed, out.RetryAfter, out.Limits[out.Tightest].Limit.Name)
	}
}

func TestDenyCacheIsExact(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	counting := &countingStore{Store: storetest.Memory(t, clock.Now)}
	src := NewStaticSource(policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 5s}}]"))
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: counting}, Source: src, Now: clock.Now})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
	}
	calls := counting.calls
	clock.Advance(5*time.Second - time.Microsecond)
	out, _ := c.Check(ctx, Input{Namespace: "ns", Request: request()})
	if out.Allowed || !out.Limits[0].Cached || counting.calls != calls {
		t.Fatalf("1µs before the refill: allowed %v cached %v store calls +%d; want a cached denial", out.Allowed, out.Limits[0].Cached, counting.calls-calls)
	}
	if out.RetryAfter != time.Microsecond {
		t.Fatalf("cached retry after %s, want 1µs", out.RetryAfter)
	}
	clock.Advance(time.Microsecond)
	if out, _ := c.Check(ctx, Input{Namespace: "ns", Request: request()}); !out.Allowed || counting.calls != calls+1 {
		t.Fatalf("at the refill: allowed %v, store calls +%d; want allowed by the store", out.Allowed, counting.calls-calls)
	}
	// A larger cost is denied from the cache only by a denial of no larger cost.
	if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Cost: 2}); err != nil {
		t.Fatal(err)
	}
	calls = counting.calls
	if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if counting.calls != calls+1 {
		t.Fatal("a cost-1 request was answered from a cost-2 denial")
	}
	// A new policy set drops the cache.
	if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request()}); err != nil {
		t.Fatal(err)
	}
	src.Set(policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 5s}}]"))
	calls = counting.calls
	if _, err := c.Check(ctx, Input{Namespace: "ns", Request: request()}); err != nil {
		t.Fatal(err)
	}
	if counting.calls != calls+1 {
		t.Fatal("after a policy change the cache still answered")
	}
}

type countingStore struct {
	ratelimit.Store
	mu    sync.Mutex
	calls int
	err   error
}

func (s *countingStore) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	s.mu.Lock()
	s.calls++
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Check(ctx, timeout, req, dec)
}

func TestFailureModesAndBreaker(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	failing := &countingStore{Store: storetest.Memory(t, clock.Now), err: errors.New("redis: connection refused")}
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: failing}, Now: clock.Now},
		policytest.Compile(t, "open", "p", "failureMode: Open\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "closed", "p", "failureMode: Closed\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		clock.Advance(6 * time.Millisecond) // failures 6ms apart count apart
		o, _ := c.Check(ctx, Input{Namespace: "open", Request: request()})
		clock.Advance(6 * time.Millisecond)
		k, _ := c.Check(ctx, Input{Namespace: "closed", Request: request()})
		if !o.Allowed || !o.Degraded || k.Allowed || k.Reason != ReasonStoreUnavailable {
			t.Fatalf("check %d: open %+v closed %+v", i, o, k)
		}
	}
	if failing.calls != 5 || c.Breaker().State() != BreakerOpen {
		t.Fatalf("store calls %d with breaker %s; want 5 calls, then open", failing.calls, c.Breaker().State())
	}
	clock.Advance(time.Second)
	failing.err = nil
	if o, _ := c.Check(ctx, Input{Namespace: "open", Request: request()}); !o.Allowed || o.Degraded {
		t.Fatalf("probe after the cooldown: %+v", o)
	}
	if c.Breaker().State() != BreakerClosed {
		t.Fatalf("breaker %s after a successful probe", c.Breaker().State())
	}
}

func TestBreakerProbesOncePerCooldown(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	b := NewBreaker(2, time.Second, clock.Now, nil)
	b.Failure()
	if !b.Allow() {
		t.Fatal("one failure below the threshold opened the breaker")
	}
	b.Failure() // the same instant: one lost connection failing many calls
	if !b.Allow() {
		t.Fatal("failures of one instant counted apart")
	}
	clock.Advance(10 * time.Millisecond)
	b.Failure()
	if b.Allow() {
		t.Fatal("open breaker allowed a call before the cooldown")
	}
	clock.Advance(time.Second)
	if !b.Allow() || b.Allow() {
		t.Fatal("after the cooldown exactly one probe goes through")
	}
	b.Failure() // the probe failed: open again for a cooldown
	if b.Allow() {
		t.Fatal("failed probe did not reopen the breaker")
	}
	clock.Advance(time.Second)
	if !b.Allow() {
		t.Fatal("no probe after the second cooldown")
	}
	b.Success()
	if b.State() != BreakerClosed || !b.Allow() || !b.Allow() {
		t.Fatal("successful probe did not close the breaker")
	}
}

func TestShadowAndCounts(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	tally := NewTally(nil)
	c := newChecker(t, Options{Now: clock.Now, Observer: tally},
		policytest.Compile(t, "ns", "enforced", "key: global\nlimits: [{name: l, fixedWindow: {limit: 3, window: 1h}}]"),
		policytest.Compile(t, "ns", "trial", "mode: Shadow\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	for i := 0; i < 5; i++ {
		if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: ratelimit.DryRun}); err != nil {
		t.Fatal(err)
	}
	got := tally.Counts()
	want := []LimitCount{
		{Namespace: "ns", Policy: "enforced", Limit: "l", Allowed: 3, Denied: 2},
		{Namespace: "ns", Policy: "trial", Limit: "l", Allowed: 1, ShadowDenied: 3}, // the 5th was a cached denial: not evaluated
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

// A dry run of a key the cache of denials holds is answered from the
// store, with every limit and its remaining units, and consumes nothing.
func TestDryRunReportsEveryLimitOfACachedDenial(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now}, policytest.Compile(t, "ns", "p", `
key: global
limits:
- {name: burst, tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1m}}
- {name: hour, fixedWindow: {limit: 10, window: 1h}}`))
	for i := 0; i < 3; i++ {
		if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
	}
	if out, _ := c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); out.Allowed || len(out.Limits) != 1 || !out.Limits[0].Cached {
		t.Fatalf("the exhausted key is not answered from the cache: %+v", out)
	}
	for range 2 { // the second dry run sees that the first consumed nothing
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: ratelimit.DryRun})
		if err != nil {
			t.Fatal(err)
		}
		if out.Allowed || len(out.Limits) != 2 {
			t.Fatalf("dry run: allowed %v, limits %+v; want a denial reporting both limits", out.Allowed, out.Limits)
		}
		for i, want := range []struct {
			name      string
			remaining int64
		}{{"burst", 0}, {"hour", 8}} {
			if lr := out.Limits[i]; lr.Limit.Name != want.name || lr.Remaining != want.remaining || lr.Cached {
				t.Errorf("dry run limit %d: %s remaining %d cached %v, want %s remaining %d from the store",
					i, lr.Limit.Name, lr.Remaining, lr.Cached, want.name, want.remaining)
			}
		}
	}
}
