package check

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// clockedStores runs f over the memory store and the Redis store, both on
// the clock f is given.
func clockedStores(t *testing.T, f func(t *testing.T, clock *ratelimittest.Clock, store ratelimit.Backend)) {
	t.Run("memory", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		f(t, clock, storetest.Memory(t, clock.Now).Backend())
	})
	t.Run("redis", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redistest.Start(t).Addr()}})
		t.Cleanup(func() { _ = client.Close() })
		s, err := redisstore.New(client, redisstore.Options{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		f(t, clock, s.Backend())
	})
}

// TestBanCachedUntilItsEnd: the cache of denials holds a ban until the
// ban's end, not until the pessimistic retry of the limit whose denial
// issued it (a concurrency limit's lease timeout, a window's end): a
// release or a refund during the ban makes room that the bucket has once
// the ban is over, and the first check after it is decided by the store.
func TestBanCachedUntilItsEnd(t *testing.T) {
	const penalty = "\npenalty: {denials: 1, within: 1m, ban: 5s, maxBan: 1m}"
	cases := []struct {
		name, spec string
		// giveBack gives back what the first request took.
		giveBack Input
		// retry is the limit's own retry a second into the ban, which a
		// cached ban reports as the store does.
		retry time.Duration
		// cached: the ban is answered from the cache of denials; a
		// concurrency limit's checks always reach the store (its hold
		// remembers a holder's duplicates, see answerFromCache).
		cached bool
	}{
		{"release", "key: global\nlimits: [{name: l, concurrency: {limit: 1, leaseTimeout: 30s}}]" + penalty,
			Input{Action: ratelimit.Release, Holder: "first"}, 29 * time.Second, false},
		{"refund", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]" + penalty,
			Input{Action: ratelimit.Refund}, 59 * time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clockedStores(t, func(t *testing.T, clock *ratelimittest.Clock, store ratelimit.Backend) {
				c := newChecker(t, Options{Backend: store, Now: clock.Now}, policytest.Compile(t, "ns", "p", tc.spec))
				check := func(in Input) *Outcome {
					t.Helper()
					in.Namespace, in.Request = "ns", request()
					out, err := c.Check(context.Background(), in)
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				if out := check(Input{Holder: "first"}); !out.Allowed {
					t.Fatalf("first request denied: %+v", out.Limits)
				}
				if out := check(Input{Holder: "second"}); out.Allowed || out.Policies[0].Ban != 5*time.Second {
					t.Fatalf("second request: allowed %v, ban %s; want denied and a 5s ban", out.Allowed, out.Policies[0].Ban)
				}
				clock.Advance(time.Second)
				if out := check(Input{Holder: "third"}); out.Allowed || !out.Limits[0].Banned || out.Limits[0].Cached != tc.cached ||
					out.RetryAfter != tc.retry || out.Limits[0].BanLeft != 4*time.Second {
					t.Fatalf("during the ban: %+v, retry %s; want a ban (cached %v), 4s left, retry %s", out.Limits[0], out.RetryAfter, tc.cached, tc.retry)
				}
				give := tc.giveBack
				check(give)
				if out := check(Input{Holder: "third"}); out.Allowed || !out.Limits[0].Banned {
					t.Fatalf("after the give-back, during the ban: %+v; want still banned", out.Limits[0])
				}
				clock.Advance(4 * time.Second) // the ban's end
				if out := check(Input{Holder: "fourth"}); !out.Allowed {
					t.Fatalf("at the ban's end, the room given back: denied %+v; want allowed", out.Limits[0])
				}
			})
		})
	}
}

// TestReadsCacheNoDenial: a dry run (explain, inspect, /v1/check's) is a
// read: its denial is not remembered, so the next check goes to the
// store as it would have without the read, and an inspection during a
// ban leaves the cached ban as it was.
func TestReadsCacheNoDenial(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	counting := &countingStore{Store: storetest.Memory(t, clock.Now)}
	c := newChecker(t, Options{Now: clock.Now, Backend: ratelimit.Backend{Store: counting}}, policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]"))
	check := func(action ratelimit.Action) *Outcome {
		t.Helper()
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: action})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	check(ratelimit.Consume)
	if out := check(ratelimit.DryRun); out.Allowed {
		t.Fatal("a dry run of a full window allowed")
	}
	if _, err := c.Buckets().Inspect(context.Background(), "ns", "p", "global"); err != nil {
		t.Fatal(err)
	}
	calls := counting.calls
	if out := check(ratelimit.Consume); out.Allowed || out.Limits[0].Cached || counting.calls != calls+1 {
		t.Fatalf("the check after the reads: %+v, %d store calls; want the store's denial", out.Limits[0], counting.calls-calls)
	}
}

// liftingStore lifts the ban of its bucket, as another process's
// operator would, while the call it passes on is under way: the call
// answers the ban, the lift (announced to this checker) comes before the
// answer does.
type liftingStore struct {
	ratelimit.Store
	resetter ratelimit.Resetter
	checker  *Checker
	lift     bool
}

func (s *liftingStore) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	err := s.Store.Check(ctx, timeout, req, dec)
	if s.lift && err == nil && len(dec.Results) > 0 && dec.Results[0].BanLeft > 0 {
		s.lift = false
		if err := s.resetter.Lift(ctx, req.Entries[0].Key); err != nil {
			return err
		}
		s.checker.ForgetLifted([]string{req.Entries[0].Key})
	}
	return err
}

// TestBanLiftedDuringItsCall: a ban answered by a call sent before a
// lift is not remembered: the lift ended it.
func TestBanLiftedDuringItsCall(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	mem := storetest.Memory(t, clock.Now)
	store := &liftingStore{Store: mem, resetter: mem}
	c := newChecker(t, Options{Now: clock.Now, Backend: ratelimit.Backend{Store: store}}, policytest.Compile(t, "ns", "p",
		"key: global\nlimits: [{name: l, concurrency: {limit: 1, leaseTimeout: 30s}}]\npenalty: {denials: 1, within: 1m, ban: 1m, maxBan: 1h}"))
	store.checker = c
	check := func(in Input) *Outcome {
		t.Helper()
		in.Namespace, in.Request = "ns", request()
		out, err := c.Check(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	check(Input{Holder: "a"})
	store.lift = true
	if out := check(Input{Holder: "b"}); out.Allowed || out.Policies[0].Ban == 0 {
		t.Fatalf("second holder: %+v; want denied with a ban", out.Limits[0])
	}
	clock.Advance(time.Second)
	check(Input{Holder: "a", Action: ratelimit.Release})
	if out := check(Input{Holder: "c"}); !out.Allowed {
		t.Fatalf("after the lift and the release: %+v; want allowed", out.Limits[0])
	}
}
