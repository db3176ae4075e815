package check

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// everyState is a policy whose limits keep their state in each of the
// places a reset clears: a hash field, a sliding log's sorted set, a
// concurrency limit's holds.
const everyState = `
key: global
limits:
- {name: window, fixedWindow: {limit: 5, window: 1m}}
- {name: log, slidingWindowLog: {limit: 5, window: 1m}}
- {name: tokens, tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 1h}}
- {name: in-flight, concurrency: {limit: 5}}
`

const leased = `
key: global
lease: {units: 2}
limits: [{name: window, fixedWindow: {limit: 10, window: 1m}}]
`

// adminStores runs f over the memory store, the Redis store (its library
// loaded ahead of the checks' timeouts) and leases of it.
func adminStores(t *testing.T, f func(t *testing.T, store ratelimit.Backend)) {
	loaded := func(t *testing.T) *redisstore.Store {
		s := storetest.Redis(t, redistest.Start(t).Addr())
		if err := s.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("memory", func(t *testing.T) { f(t, storetest.Memory(t, nil).Backend()) })
	t.Run("redis", func(t *testing.T) { f(t, loaded(t).Backend()) })
	t.Run("lease", func(t *testing.T) {
		s := lease.New(loaded(t).Backend(), lease.Options{})
		t.Cleanup(func() { _ = s.Close() })
		f(t, s.Backend())
	})
}

func remainingOf(t *testing.T, c *Checker, name string) map[string]int64 {
	t.Helper()
	out, err := c.Buckets().Inspect(context.Background(), "ns", name, "global")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, l := range out.Limits {
		m[l.Limit.Name] = l.Remaining
	}
	return m
}

// TestResetEveryState: a reset leaves each limit as if never used, one
// limit or all of them, and Inspect counts nothing.
func TestResetEveryState(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		ctx := context.Background()
		c := newChecker(t, Options{Backend: store}, policytest.Compile(t, "ns", "p", everyState), policytest.Compile(t, "ns", "leased", leased))
		for _, holder := range []string{"r1", "r2", "r3"} {
			if _, err := c.Check(ctx, Input{Namespace: "ns", Policy: "p", Request: request(), Holder: holder}); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]int64{"window": 2, "log": 2, "tokens": 2, "in-flight": 2}
		if got := remainingOf(t, c, "p"); !equal(got, want) {
			t.Fatalf("after 3 checks: %v, want %v", got, want)
		}
		if got := remainingOf(t, c, "p"); !equal(got, want) {
			t.Fatalf("inspect counted: %v", got)
		}
		if names, err := c.Buckets().Reset(ctx, "ns", "p", "global", []string{"log"}); err != nil || len(names) != 1 {
			t.Fatalf("reset log: %v %v", names, err)
		}
		want["log"] = 5
		if got := remainingOf(t, c, "p"); !equal(got, want) {
			t.Fatalf("after reset of log: %v, want %v", got, want)
		}
		if _, err := c.Buckets().Reset(ctx, "ns", "p", "global", nil); err != nil {
			t.Fatal(err)
		}
		want = map[string]int64{"window": 5, "log": 5, "tokens": 5, "in-flight": 5}
		if got := remainingOf(t, c, "p"); !equal(got, want) {
			t.Fatalf("after reset of all: %v, want %v", got, want)
		}
		if _, err := c.Buckets().Reset(ctx, "ns", "p", "global", []string{"nope"}); !errors.Is(err, ErrUnknownLimit) {
			t.Fatalf("unknown limit: %v", err)
		}

		// A leased bucket: the units this process holds go with the reset.
		for range 3 {
			if _, err := c.Check(ctx, Input{Namespace: "ns", Policy: "leased", Request: request()}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Buckets().Reset(ctx, "ns", "leased", "global", nil); err != nil {
			t.Fatal(err)
		}
		if got := remainingOf(t, c, "leased"); got["window"] != 10 {
			t.Fatalf("leased after reset: %v", got)
		}
		out, err := c.Check(ctx, Input{Namespace: "ns", Policy: "leased", Request: request()})
		if err != nil || !out.Allowed {
			t.Fatal(out, err)
		}
		if got := remainingOf(t, c, "leased"); got["window"] < 8 {
			t.Fatalf("leased after reset and one check: %v: a lease from before the reset was used", got)
		}
	})
}

// TestLiftAndBanIndex: a ban a check issues is listed, a reset keeps it,
// a lift ends it (also the denial this process remembered) and unlists it.
func TestLiftAndBanIndex(t *testing.T) {
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		if _, ok := store.Store.(*lease.Store); ok {
			t.Skip("a leased policy has no penalty box")
		}
		ctx := context.Background()
		c := newChecker(t, Options{Backend: store}, policytest.Compile(t, "ns", "p", penaltySpec))
		var out *Outcome
		for range 4 {
			out, _ = burst(t, c, 1)
		}
		if out.Allowed || !out.Limits[0].Banned && out.Policies[0].Ban == 0 {
			t.Fatalf("not banned: %+v", out.Limits)
		}
		var bans []ratelimit.Ban
		waitFor(t, func() bool { bans, _ = c.Buckets().Bans(ctx, "ns", "p"); return len(bans) == 1 })
		if _, err := c.Buckets().Reset(ctx, "ns", "p", bans[0].KeyValue, nil); err != nil {
			t.Fatal(err)
		}
		if out, _ = burst(t, c, 1); out.Allowed {
			t.Fatal("a reset lifted the ban")
		}
		if err := c.Buckets().Lift(ctx, "ns", "p", bans[0].KeyValue); err != nil {
			t.Fatal(err)
		}
		if out, _ = burst(t, c, 1); !out.Allowed {
			t.Fatalf("after lift: %+v", out.Limits)
		}
		if bans, _ = c.Buckets().Bans(ctx, "ns", "p"); len(bans) != 0 {
			t.Fatalf("bans after lift: %+v", bans)
		}
	})
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitFor polls cond for up to 5s: the index of bans is written off the
// check's path.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
