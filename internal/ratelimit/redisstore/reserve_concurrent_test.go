package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestReservationsConcurrentExact: many admissions at once, each with a
// reservation in two limits of one budget, over several stores (their
// own connections) of one Redis, admit exactly what fits; then every
// holder settles twice at once, denied ones included: each reservation is
// settled once, in both limits alike, so the budget ends charged exactly
// the actual costs of the admitted.
func TestReservationsConcurrentExact(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	stores := make([]*redisstore.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	}
	minute := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Hour}
	day := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 50_000, Interval: 24 * time.Hour}
	entries := func(holder string, cost int64) []ratelimit.Entry {
		return []ratelimit.Entry{
			{Key: ratelimit.Key("tok", "budget", "acme", "minute"), Limit: minute, Cost: cost, Holder: holder},
			{Key: ratelimit.Key("tok", "budget", "acme", "day"), Limit: day, Cost: cost, Holder: holder},
		}
	}
	const n, estimate = 64, 70
	admitted := make([]bool, n)
	run := func(f func(i int, s *redisstore.Store)) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { f(i, stores[i%len(stores)]) })
		}
		wg.Wait()
	}
	var errs atomic.Int64
	call := func(s *redisstore.Store, req *ratelimit.Request) ratelimit.Decision {
		var dec ratelimit.Decision
		if err := s.Check(context.Background(), 0, req, &dec); err != nil {
			errs.Add(1)
			t.Error(err)
		}
		return dec
	}
	run(func(i int, s *redisstore.Store) {
		req := ratelimit.Request{Entries: entries(fmt.Sprint("r", i), estimate)}
		for j := range req.Entries {
			req.Entries[j].Reserve = time.Minute
		}
		admitted[i] = call(s, &req).Allowed
	})
	count := 0
	for _, a := range admitted {
		if a {
			count++
		}
	}
	if count != 1000/estimate {
		t.Fatalf("%d admitted, want exactly %d", count, 1000/estimate)
	}
	rng := rand.New(rand.NewPCG(44, 44))
	actual := make([]int64, n)
	var want int64
	for i := range actual {
		actual[i] = rng.Int64N(100)
		if admitted[i] {
			want += actual[i]
		}
	}
	var settled atomic.Int64
	run(func(i int, s *redisstore.Store) {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				req := ratelimit.Request{Action: ratelimit.Settle, Entries: entries(fmt.Sprint("r", i), actual[i])}
				dec := call(s, &req)
				if dec.Allowed {
					settled.Add(1)
					if dec.Results[0].Settled != estimate || dec.Results[1].Settled != estimate {
						t.Errorf("r%d settled %+v, want %d in both limits", i, dec.Results, estimate)
					}
				}
			})
		}
		wg.Wait()
	})
	if settled.Load() != int64(count) || errs.Load() != 0 {
		t.Fatalf("%d settlements settled, want %d (once per admitted holder)", settled.Load(), count)
	}
	dec := call(stores[0], &ratelimit.Request{Action: ratelimit.DryRun, Entries: entries("", 0)})
	if r := dec.Results; r[0].Remaining != max(0, 1000-want) || r[1].Remaining != 50_000-want || r[0].Reserved != 0 || r[1].Reserved != 0 {
		t.Fatalf("after the settlements: %+v, want %d and %d left, nothing reserved (actual costs %d)", r, max(0, 1000-want), 50_000-want, want)
	}
}
