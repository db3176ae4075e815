package ratelimittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// BatchTarget evaluates several requests together, the way a Redis store
// merges the requests queued at one moment into one library call: the
// result must be exactly that of checking each request on its own, in
// order, request i at time at[i] (µs since the epoch; non-decreasing).
type BatchTarget struct {
	Name  string
	Check func(ctx context.Context, reqs []*ratelimit.Request, at []int64, decs []ratelimit.Decision) error
}

// BatchStats counts what RunBatchDifferential exercised, on top of the
// per-request DiffStats.
type BatchStats struct {
	DiffStats
	// Batches sent; Shared is how many requests touched a key that an
	// earlier request of the same batch had touched (so they depend on
	// what it consumed); Instants how many batches held requests at
	// different times.
	Batches, Shared, Instants int
}

func (s BatchStats) String() string {
	return fmt.Sprintf("%d batches (%d requests sharing a key with an earlier one of their batch, %d batches spanning several instants); %s",
		s.Batches, s.Shared, s.Instants, s.DiffStats)
}

// RunBatchDifferential drives one random timeline on ref's clock in batches
// of 1..maxBatch random requests (often large, over few keys, so requests
// of one batch depend on each other), sends every batch to target, applies
// the same requests one by one to ref, and fails on the first Decision that
// differs in any field. Requests of a batch mostly share one instant (as
// production, where one call reads TIME once); some batches spread them
// over a few microseconds or more.
func RunBatchDifferential(t testing.TB, rng *rand.Rand, cfg DiffConfig, maxBatch int, ref *Reference, target BatchTarget) BatchStats {
	t.Helper()
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 4
	}
	run := fmt.Sprintf("%x", rng.Uint64())
	keys := make([]*diffKey, cfg.Keys)
	for i := range keys {
		keys[i] = &diffKey{key: ratelimit.Key("batch", run, fmt.Sprint(i/3), fmt.Sprint(i)), limits: map[ratelimit.Algorithm]ratelimit.Limit{}}
		keys[i].switchTo(rng, cfg.Algorithms[i%len(cfg.Algorithms)])
	}
	st := BatchStats{DiffStats: DiffStats{PerAlgorithm: map[ratelimit.Algorithm]int{}}}
	ctx := context.Background()
	var refDec ratelimit.Decision
	for st.Requests < cfg.Requests {
		k := 1 + rng.IntN(maxBatch)
		if rng.IntN(3) == 0 {
			k = maxBatch
		}
		spread := rng.IntN(4) == 0
		reqs := make([]*ratelimit.Request, k)
		at := make([]int64, k)
		touched := map[string]bool{}
		for i := range reqs {
			if len(cfg.Algorithms) > 1 && rng.IntN(100) == 0 {
				kk := keys[rng.IntN(len(keys))]
				kk.switchTo(rng, cfg.Algorithms[rng.IntN(len(cfg.Algorithms))])
				st.Switches++
			}
			req := randomRequest(rng, keys, cfg.MaxEntries)
			switch {
			case i == 0:
				// Keep the simulated clock in this century (see RunDifferential).
				ref.Clock.Advance(RandomAdvance(rng, min(req.Entries[rng.IntN(len(req.Entries))].Limit.Interval, time.Minute), 0))
			case spread && rng.IntN(2) == 0:
				ref.Clock.Advance(time.Duration(rng.Int64N(3000)) * time.Microsecond)
			}
			reqs[i], at[i] = req, ref.Clock.Micros()
			shared := false
			for _, e := range req.Entries {
				shared = shared || touched[e.Key]
				touched[e.Key] = true
			}
			if shared {
				st.Shared++
			}
		}
		if at[0] != at[k-1] {
			st.Instants++
		}
		// The batch was built with the clock at its last request's time;
		// the reference replays from the first.
		end := ref.Clock.Micros()
		decs := make([]ratelimit.Decision, k)
		if err := target.Check(ctx, reqs, at, decs); err != nil {
			t.Fatalf("batch %d: %s: %v", st.Batches, target.Name, err)
		}
		ref.Clock.Advance(time.Duration(at[0]-end) * time.Microsecond)
		for i, req := range reqs {
			ref.Clock.Advance(time.Duration(at[i]-ref.Clock.Micros()) * time.Microsecond)
			if err := ref.Check(ctx, 0, req, &refDec); err != nil {
				t.Fatalf("batch %d request %d: reference: %v", st.Batches, i, err)
			}
			if !sameDecision(&refDec, &decs[i]) {
				t.Fatalf("batch %d request %d of %d at t=%d: %s differs from the model\nrequest %s\nmodel %s\n%-5s %s\nbatch:\n%s",
					st.Batches, i, k, at[i], target.Name, fmtRequest(req), fmtDecision(&refDec), target.Name, fmtDecision(&decs[i]), fmtBatch(reqs[:i+1], at))
			}
			st.Requests++
			if req.Action == ratelimit.DryRun {
				st.DryRuns++
			}
			if refDec.Allowed {
				st.Allowed++
			} else {
				st.Denied++
			}
			for j, e := range req.Entries {
				st.Entries++
				st.PerAlgorithm[e.Limit.Algorithm]++
				if e.Shadow {
					st.Shadows++
				}
				if r := refDec.Results[j]; !r.Allowed {
					st.EntryDenials++
					if r.RetryAfter == ratelimit.Never {
						st.Never++
					}
				}
			}
		}
		st.Batches++
	}
	return st
}

func fmtBatch(reqs []*ratelimit.Request, at []int64) string {
	var b strings.Builder
	for i, r := range reqs {
		fmt.Fprintf(&b, "#%d t=%d %s\n", i, at[i], fmtRequest(r))
	}
	return b.String()
}
