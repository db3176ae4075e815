package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestBatchDifferential: random batches of requests, merged into library
// commands the way flushers merge the requests queued together, give
// exactly the decisions of the model applied to the requests one by one,
// in order (requests of a batch share keys, so each depends on what the
// earlier ones consumed); every key then expires exactly when the model
// says. With MaxMerge 64 every batch is one command; with 5, several
// commands in one pipeline.
func TestBatchDifferential(t *testing.T) {
	type run struct {
		name     string
		algs     []ratelimit.Algorithm
		requests int
		mode     redisstore.Mode
		maxMerge int
	}
	var runs []run
	for _, alg := range ratelimit.Algorithms {
		runs = append(runs, run{alg.String(), []ratelimit.Algorithm{alg}, 4000, redisstore.ModeFunctions, 64})
	}
	runs = append(runs,
		run{"mixed", ratelimit.Algorithms, 8000, redisstore.ModeFunctions, 64},
		run{"mixed-scripts", ratelimit.Algorithms, 2000, redisstore.ModeScripts, 64},
		run{"mixed-split", ratelimit.Algorithms, 3000, redisstore.ModeFunctions, 5},
	)
	for n, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			clock := ratelimittest.FutureClock()
			ref := ratelimittest.NewReference(clock)
			s := newStore(t, srv, redisstore.Options{Mode: r.mode, MaxMerge: r.maxMerge, Clock: clock.Now})
			if err := s.EnsureLoaded(context.Background()); err != nil { // no resends to count
				t.Fatal(err)
			}
			cfg := ratelimittest.DiffConfig{Requests: r.requests, Algorithms: r.algs, Keys: 8, MaxEntries: 4}
			st := ratelimittest.RunBatchDifferential(t, rand.New(rand.NewPCG(uint64(100+n), ratelimittest.Seed(t, 2027))), cfg, 40, ref,
				ratelimittest.BatchTarget{Name: "lua", Check: s.CheckBatch})
			stats := s.Stats()
			t.Logf("%s: %s; %d calls in %d commands, %d pipelines", r.name, st, stats.Calls, stats.Commands, stats.Pipelines)
			if stats.Pipelines != uint64(st.Batches) || stats.Calls != uint64(st.Requests) {
				t.Fatalf("%d pipelines for %d batches, %d calls for %d requests", stats.Pipelines, st.Batches, stats.Calls, st.Requests)
			}
			if r.maxMerge >= 40 && stats.Commands != uint64(st.Batches) {
				t.Fatalf("%d commands for %d batches: not merged", stats.Commands, st.Batches)
			}
			if st.Shared == 0 || st.Instants == 0 {
				t.Fatalf("the timeline did not exercise dependent requests or several instants: %s", st)
			}
			checkExpiries(t, ref, srv.Client())
		})
	}
}

// TestBatchServerTime: requests merged into one command without an
// explicit time read the server's TIME once, so they are evaluated at one
// instant: the later ones see exactly what the earlier ones consumed.
func TestBatchServerTime(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	if err := s.EnsureLoaded(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 10, Rate: 1, Interval: time.Second}
	e := ratelimit.Entry{Key: "gcra", Limit: l, Cost: 1}
	reqs := make([]*ratelimit.Request, 12)
	at := make([]int64, len(reqs))
	for i := range reqs {
		reqs[i], at[i] = &ratelimit.Request{Entries: []ratelimit.Entry{e}}, -1
	}
	decs := make([]ratelimit.Decision, len(reqs))
	if err := s.CheckBatch(context.Background(), reqs, at, decs); err != nil {
		t.Fatal(err)
	}
	for i, d := range decs {
		r := d.Results[0]
		if i < 10 {
			// One instant: GCRA's level grows by exactly one unit per request.
			if !d.Allowed || r.Remaining != int64(9-i) || r.Reset != time.Duration(i+1)*time.Second {
				t.Fatalf("request %d: %+v", i, d)
			}
		} else if d.Allowed || r.RetryAfter != time.Second {
			t.Fatalf("request %d: %+v, want denied, retry after exactly 1s", i, d)
		}
	}
	if st := s.Stats(); st.Commands != 1 || st.Calls != 12 {
		t.Fatalf("stats %+v: want 12 calls in one command", st)
	}
}

// TestBatchReload: when the library is missing, a merged command did not
// run: it is resent once after the load, and every request in it is applied
// exactly once.
func TestBatchReload(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, srv, redisstore.Options{Mode: mode})
			ctx := context.Background()
			l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}
			batch := func(n int) []ratelimit.Decision {
				reqs, at := make([]*ratelimit.Request, n), make([]int64, n)
				for i := range reqs {
					reqs[i] = &ratelimit.Request{Entries: []ratelimit.Entry{
						{Key: ratelimit.Key("ns", "p", "v", "fw"), Limit: l, Cost: 1},
						{Key: ratelimit.Key("ns", "p", fmt.Sprint(i), "own"), Limit: l, Cost: 2},
					}}
					at[i] = -1
				}
				decs := make([]ratelimit.Decision, n)
				if err := s.CheckBatch(ctx, reqs, at, decs); err != nil {
					t.Fatal(err)
				}
				return decs
			}
			batch(3) // loads the library
			for _, flush := range []string{"function", "script"} {
				loads := s.Stats().Loads
				if err := srv.Client().Do(ctx, flush, "flush").Err(); err != nil {
					t.Fatal(err)
				}
				before := s.Stats()
				decs := batch(10)
				after := s.Stats()
				if mode.String() == "functions" && flush == "script" || mode.String() == "scripts" && flush == "function" {
					if after.Loads != loads || after.Commands-before.Commands != 1 {
						t.Fatalf("%s flush in %s mode: %+v -> %+v", flush, mode, before, after)
					}
				} else if after.Loads != loads+1 || after.Commands-before.Commands != 2 {
					t.Fatalf("after %s flush: %d loads, %d commands (want 1 load, the command sent twice)", flush, after.Loads-loads, after.Commands-before.Commands)
				}
				_ = decs
			}
			peek := ratelimit.Request{Action: ratelimit.DryRun, Entries: []ratelimit.Entry{{Key: ratelimit.Key("ns", "p", "v", "fw"), Limit: l, Cost: 0}}}
			if got := check(t, s, peek).Results[0].Remaining; got != 100-23 {
				t.Fatalf("shared key has %d left after 23 requests, want %d (a request applied twice or lost)", got, 100-23)
			}
		})
	}
}

// TestMergedAdmission: many concurrent callers over one flusher, so their
// requests queue and are merged into large commands, still admit exactly
// the capacity, for every algorithm, with single- and two-entry requests
// (no request is applied twice, lost, or split).
func TestMergedAdmission(t *testing.T) {
	srv := redistest.Start(t)
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, PoolSize: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	s := storeOver(t, c, redisstore.Options{Flushers: 1, MaxMerge: 32})
	if err := s.EnsureLoaded(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, l := range ratelimittest.NoRefillLimits(300) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			before := s.Stats()
			key := ratelimit.Key("merged", "redis", l.Algorithm.String(), "l")
			if got := ratelimittest.AdmitConcurrently(t, s, key, l, 64, 20); got != 300 {
				t.Fatalf("admitted %d, want 300", got)
			}
			st := s.Stats()
			calls, cmds := st.Calls-before.Calls, st.Commands-before.Commands
			t.Logf("%d calls in %d commands (%.1f per command)", calls, cmds, float64(calls)/float64(cmds))
			if calls != 64*20 || cmds*2 > calls {
				t.Fatalf("%d calls in %d commands: not merged", calls, cmds)
			}
		})
	}
	t.Run("pairs", func(t *testing.T) {
		ratelimittest.CheckAtomicPairs(t, s, "merged")
	})
	t.Run("spread and shared keys", func(t *testing.T) {
		// Each request takes one unit from a shared key (capacity 500) and
		// one from its worker's own key (capacity 7): exactly 7 per worker
		// pass until the shared key runs out.
		shared := ratelimit.Entry{Key: ratelimit.Key("merged", "mix", "shared", "s"), Limit: ratelimittest.NoRefillLimits(500)[0], Cost: 1}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := range 100 {
			wg.Go(func() {
				own := ratelimit.Entry{Key: ratelimit.Key("merged", "mix", fmt.Sprint(w), "o"), Limit: ratelimittest.NoRefillLimits(7)[2], Cost: 1}
				req := ratelimit.Request{Entries: []ratelimit.Entry{own, shared}}
				var dec ratelimit.Decision
				for range 10 {
					if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
						t.Error(err)
						return
					}
					if dec.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 500 {
			t.Fatalf("admitted %d, want 500", admitted.Load())
		}
	})
}
