package model_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestProperties walks random timelines per algorithm and checks, at every
// step, what the documentation promises:
//   - RetryAfter is exact: 1µs earlier the same cost is denied, at it allowed;
//   - Remaining is the largest cost that fits now;
//   - Reset and ResetAfter end exactly when the state equals untouched;
//   - a cost above the capacity is denied with Never, nothing else is.
func TestProperties(t *testing.T) {
	for _, alg := range ratelimit.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg), ratelimittest.Seed(t, 42)))
			var denials, resets int
			walk(t, rng, alg, func(p model.Params, st *model.State, now, cost int64) time.Duration {
				v, _ := model.Check(p, st, now, cost)
				checkVerdict(t, p, st, now, cost, v)
				denials += checkRetry(t, p, st, now, cost, v)
				checkUntouchedAt(t, p, st, now+v.Reset, "Reset")
				if v.Allowed && cost > 0 {
					// Last Check on st: next may share st.Log's array.
					_, next := model.Check(p, st, now, cost)
					checkUntouchedAt(t, p, &next, now+v.ResetAfter, "ResetAfter")
					*st = next
					resets++
				}
				return time.Duration(max(v.RetryAfter, v.Reset)) * time.Microsecond
			})
			t.Logf("%s: %d steps, %d exact retry-after checks, %d consumed states", alg, walkLimits*walkSteps, denials, resets)
		})
	}
}

// walkLimits random limits of an algorithm, walkSteps steps each, make
// one walk.
const walkLimits, walkSteps = 60, 400

// walk runs step walkSteps times on each of walkLimits random limits of
// alg, from untouched state: each step is at a time RandomAdvance moved
// towards the hint the last step returned, with a RandomCost. step may
// replace *st.
func walk(t *testing.T, rng *rand.Rand, alg ratelimit.Algorithm, step func(p model.Params, st *model.State, now, cost int64) (hint time.Duration)) {
	t.Helper()
	for range walkLimits {
		l := ratelimittest.RandomLimit(rng, alg)
		p, err := model.Compile(l)
		if err != nil {
			t.Fatal(err)
		}
		var st model.State
		now := int64(1_700_000_000_000_000)
		var hint time.Duration
		for range walkSteps {
			now += ratelimittest.RandomAdvance(rng, l.Interval, hint).Microseconds()
			hint = step(p, &st, now, ratelimittest.RandomCost(rng, l))
		}
	}
}

func checkVerdict(t *testing.T, p model.Params, st *model.State, now, cost int64, v model.Verdict) {
	t.Helper()
	if (v.RetryAfter == model.Never) != (cost > p.Capacity) {
		t.Fatalf("%v cost %d capacity %d: retry %d", p.Alg, cost, p.Capacity, v.RetryAfter)
	}
	// After the clock steps back, a state can be over its limit (a sliding
	// counter's weight grows again): then nothing fits, not even cost 0.
	if over, _ := model.Check(p, st, now, 0); !over.Allowed {
		if v.Allowed || v.Remaining != 0 {
			t.Fatalf("%v: over the limit but %+v", p.Alg, v)
		}
		return
	}
	if v.Allowed != (cost <= v.Remaining) {
		t.Fatalf("%v: allowed=%v but cost %d, remaining %d", p.Alg, v.Allowed, cost, v.Remaining)
	}
	if v.Allowed && (v.RetryAfter != 0 || v.RemainingAfter != v.Remaining-cost) {
		t.Fatalf("%v: allowed verdict %+v for cost %d", p.Alg, v, cost)
	}
	if !v.Allowed && (v.RemainingAfter != v.Remaining || v.ResetAfter != v.Reset || v.RetryAfter == 0) {
		t.Fatalf("%v: denied verdict %+v", p.Alg, v)
	}
	if v.Reset < 0 || v.ResetAfter < 0 || v.Remaining < 0 || v.Remaining > p.Capacity {
		t.Fatalf("%v: verdict out of range %+v", p.Alg, v)
	}
	if v.Allowed && cost > 0 && v.ResetAfter == 0 {
		t.Fatalf("%v: consumed state with no TTL %+v", p.Alg, v)
	}
	// Remaining is the largest cost that fits.
	if r := v.Remaining; r < p.Capacity {
		if w, _ := model.Check(p, st, now, r+1); w.Allowed {
			t.Fatalf("%v: remaining %d but cost %d fits", p.Alg, r, r+1)
		}
	}
	if w, _ := model.Check(p, st, now, v.Remaining); !w.Allowed {
		t.Fatalf("%v: remaining %d does not fit", p.Alg, v.Remaining)
	}
}

func checkRetry(t *testing.T, p model.Params, st *model.State, now, cost int64, v model.Verdict) int {
	t.Helper()
	if v.Allowed || v.RetryAfter == model.Never {
		return 0
	}
	if w, _ := model.Check(p, st, now+v.RetryAfter-1, cost); w.Allowed {
		t.Fatalf("%v: retry %dµs but allowed 1µs earlier (state %+v, now %d, cost %d)", p.Alg, v.RetryAfter, *st, now, cost)
	}
	if w, _ := model.Check(p, st, now+v.RetryAfter, cost); !w.Allowed {
		t.Fatalf("%v: retry %dµs but still denied then (state %+v, now %d, cost %d)", p.Alg, v.RetryAfter, *st, now, cost)
	}
	return 1
}

// checkUntouchedAt: from time at on, st answers like no state at all.
func checkUntouchedAt(t *testing.T, p model.Params, st *model.State, at int64, what string) {
	t.Helper()
	for _, dt := range []int64{0, 1, p.Interval} {
		for _, cost := range []int64{0, 1, p.Capacity} {
			got, _ := model.Check(p, st, at+dt, cost)
			want, _ := model.Check(p, nil, at+dt, cost)
			if got != want {
				t.Fatalf("%v: %s at %d+%d, cost %d: state %+v gives %+v, untouched %+v", p.Alg, what, at, dt, cost, *st, got, want)
			}
		}
	}
}

// TestRefundProperties walks random timelines of checks and refunds per
// algorithm and checks what Refund promises:
//   - a refund of n raises the room (Remaining) by at most n, never lowers
//     it, and never moves the state further from untouched (Reset);
//   - the refunded state is untouched when its Reset says;
//   - a cost admitted and refunded at the same instant leaves the figures
//     as they were before the check.
func TestRefundProperties(t *testing.T) {
	for _, alg := range ratelimit.Algorithms {
		if alg == ratelimit.Concurrency {
			continue // what is held comes back by holder: TestReleaseProperties
		}
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg), ratelimittest.Seed(t, 43)))
			var refunds, changed, roundTrips int
			walk(t, rng, alg, func(p model.Params, st *model.State, now, cost int64) time.Duration {
				before, _ := model.Check(p, st, now, 0)
				if rng.IntN(3) == 0 {
					v, next := model.Refund(p, st, now, cost)
					refunds++
					if !v.Allowed || v.RetryAfter != 0 || v.RemainingAfter != v.Remaining || v.ResetAfter != v.Reset {
						t.Fatalf("%v: refund verdict %+v", alg, v)
					}
					if v.Remaining < before.Remaining || v.Remaining > before.Remaining+cost || v.Reset > before.Reset {
						t.Fatalf("%v: refund of %d at %d: state %+v had remaining %d reset %d, now %+v", alg, cost, now, *st, before.Remaining, before.Reset, v)
					}
					if next.Alg != 0 {
						checkUntouchedAt(t, p, &next, now+v.Reset, "refund's Reset")
						*st = next
						changed++
					}
					return time.Duration(v.Reset) * time.Microsecond
				}
				v, next := model.Check(p, st, now, cost)
				if v.Allowed && cost > 0 {
					// Last Check on st: next may share st.Log's array.
					back, _ := model.Refund(p, &next, now, cost)
					if back.Remaining != before.Remaining || back.Reset != before.Reset {
						t.Fatalf("%v: cost %d taken and refunded at %d: remaining %d reset %d, before %d and %d", alg, cost, now, back.Remaining, back.Reset, before.Remaining, before.Reset)
					}
					roundTrips++
					*st = next
				}
				return time.Duration(max(v.RetryAfter, v.Reset)) * time.Microsecond
			})
			t.Logf("%s: %d refunds (%d changed the state), %d admitted costs refunded at once", alg, refunds, changed, roundTrips)
		})
	}
}
