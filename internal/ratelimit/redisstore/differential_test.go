package redisstore_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestDifferential runs random timelines through the Go model (Reference),
// the memory store and the Lua library on one simulated clock and requires
// identical decisions (allowed, remaining, reset, retry-after) for every
// request; retry-after moments are probed 1µs before and at. Afterwards
// every key in Redis (a bucket, or a log) must expire exactly when the
// model says the last state written to it is untouched again. (Requests
// name random subsets of each bucket's three limits, so a bucket's expiry
// is checked against writes of any of its limits.)
func TestDifferential(t *testing.T) {
	type run struct {
		name      string
		algs      []ratelimit.Algorithm
		requests  int
		mode      redisstore.Mode
		penalties bool
		reserves  bool
	}
	var runs []run
	for _, alg := range ratelimit.Algorithms {
		runs = append(runs, run{alg.String(), []ratelimit.Algorithm{alg}, 5000, redisstore.ModeFunctions, false, false})
	}
	runs = append(runs,
		run{"mixed", ratelimit.Algorithms, 8000, redisstore.ModeFunctions, false, false},
		run{"mixed-scripts", ratelimit.Algorithms, 2000, redisstore.ModeScripts, false, false},
		run{"penalties", ratelimit.Algorithms, 8000, redisstore.ModeFunctions, true, false},
		run{"reserves", ratelimit.Algorithms, 8000, redisstore.ModeFunctions, true, true},
	)
	for n, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			clock := ratelimittest.FutureClock()
			ref := ratelimittest.NewReference(clock)
			mem := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0))
			t.Cleanup(func() { _ = mem.Close() })
			lua := newStore(t, srv, simOpts(clock, r.mode))
			cfg := ratelimittest.DiffConfig{Requests: r.requests, Algorithms: r.algs, Keys: 12, MaxEntries: 5, Penalties: r.penalties, Reserves: r.reserves}
			st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(uint64(n), ratelimittest.Seed(t, 2026))), cfg, ref,
				ratelimittest.Target{Name: "memstore", Store: mem}, ratelimittest.Target{Name: "lua", Store: lua})
			t.Logf("%s: %s", r.name, st)
			if r.reserves && (st.Reserving == 0 || st.Settled == 0) {
				t.Fatalf("the timeline made %d reservations and settled %d: want both", st.Reserving, st.Settled)
			}
			checkExpiries(t, ref, srv.Client())
		})
	}
}

// checkExpiries: Redis holds exactly the keys the layout holds for the
// model's writes (Reference.Keys: buckets and logs), each with a TTL ending
// at the model's TTL rounded up to the millisecond.
func checkExpiries(t *testing.T, ref *ratelimittest.Reference, nodes ...*redis.Client) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for _, c := range nodes {
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		total += len(keys)
		checkNodeExpiries(t, ref, c, keys)
	}
	if total != len(ref.Keys()) {
		t.Fatalf("redis holds %d keys, the model's writes make %d", total, len(ref.Keys()))
	}
	t.Logf("%d keys, every expiry equal to the model's", total)
}

func checkNodeExpiries(t *testing.T, ref *ratelimittest.Reference, c *redis.Client, keys []string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		at, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		want, ok := ref.ExpiresAt(k)
		if !ok {
			t.Fatalf("redis key %s was never written by the model", k)
		}
		if wantMs := (want + 999) / 1000; at != wantMs {
			t.Fatalf("key %s expires at %dms, model says %dµs (%dms)", k, at, want, wantMs)
		}
		if pttl := c.PTTL(ctx, k).Val(); pttl <= 0 {
			t.Fatalf("key %s has PTTL %s", k, pttl)
		}
	}
}
