package ratelimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Skip in an expected Reset or RetryAfter means "not checked".
const Skip = time.Duration(-2)

// Example is the documented behavior of one algorithm as a timeline.
type Example struct {
	Name  string
	Limit ratelimit.Limit
	Steps []Step
}

// Step advances the clock, then checks Cost once and expects the outcome.
type Step struct {
	Advance    time.Duration
	Cost       int64
	Allowed    bool
	Remaining  int64
	Reset      time.Duration // Skip: not checked
	RetryAfter time.Duration // checked when !Allowed unless Skip
	// Always: the entry charges always (ratelimit.Entry.ChargeAlways).
	Always bool
}

// ok is an admitted step without a clock move.
func ok(remaining int64, reset time.Duration) Step {
	return Step{Cost: 1, Allowed: true, Remaining: remaining, Reset: reset}
}

// burst is n admitted steps of cost 1 at one instant, starting from
// remaining n-1+left; reset of each is not checked.
func burst(n int, left int64) []Step {
	steps := make([]Step, n)
	for i := range steps {
		steps[i] = ok(left+int64(n-1-i), Skip)
	}
	return steps
}

func denied(advance time.Duration, cost, remaining int64, retry time.Duration) Step {
	return Step{Advance: advance, Cost: cost, Remaining: remaining, Reset: Skip, RetryAfter: retry}
}

func after(advance time.Duration, s Step) Step { s.Advance = advance; return s }

// charged is a step charging always, denied and charged all the same: the
// result reports the state after the charge (nothing remains, untouched
// again after reset) and the retry counting the charge.
func charged(advance time.Duration, cost int64, retry, reset time.Duration) Step {
	return Step{Advance: advance, Cost: cost, Always: true, Reset: reset, RetryAfter: retry}
}

// admitted is a step charging always that fits.
func admitted(cost, remaining int64, reset time.Duration) Step {
	return Step{Cost: cost, Always: true, Allowed: true, Remaining: remaining, Reset: reset}
}

func cat(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const us = time.Microsecond

// Examples returns one timeline per algorithm, following each algorithm's
// documented semantics (ratelimit.Algorithm), plus the edge cases those
// leave open (costs, "never", exact retry moments). Each starts at a clock aligned to an hour.
func Examples() []Example {
	return []Example{
		{
			// Documented: capacity 10, refill 1 per second: 10 allowed, the 11th
			// denied, one more after 1s, never above 10.
			Name:  "TokenBucket/capacity10-refill1per1s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Second},
			Steps: cat(
				[]Step{ok(9, time.Second)},
				burst(9, 0),
				[]Step{
					{Cost: 0, Allowed: true, Remaining: 0, Reset: 10 * time.Second},
					denied(0, 1, 0, time.Second),
					denied(time.Second-us, 1, 0, us),
					after(us, ok(0, 10*time.Second)),
					denied(0, 1, 0, time.Second),
					after(time.Hour, ok(9, time.Second)), // full again: not above 10
					denied(0, 11, 9, ratelimit.Never),
					{Cost: 9, Allowed: true, Remaining: 0, Reset: 10 * time.Second},
				},
			),
		},
		{
			// Documented: capacity 100, refill 10 per second: bursts of 100.
			Name:  "TokenBucket/capacity100-refill10per1s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 100, Rate: 10, Interval: time.Second},
			Steps: []Step{
				{Cost: 100, Allowed: true, Remaining: 0, Reset: 10 * time.Second},
				denied(0, 1, 0, time.Second),
				denied(0, 25, 0, 3*time.Second),
				{Advance: 2500 * time.Millisecond, Cost: 20, Allowed: true, Remaining: 0, Reset: 9500 * time.Millisecond},
				denied(0, 1, 0, 500*time.Millisecond),
			},
		},
		{
			// Documented: a fixed window counts per window; 2x burst at the boundary.
			Name:  "FixedWindow/limit5-window1m",
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Minute},
			Steps: cat(
				[]Step{ok(4, time.Minute)},
				burst(4, 0),
				[]Step{
					denied(0, 1, 0, time.Minute),
					denied(30*time.Second, 1, 0, 30*time.Second),
					after(30*time.Second, ok(4, time.Minute)), // new window from here
					{Advance: time.Minute - us, Cost: 4, Allowed: true, Remaining: 0, Reset: us},
					after(us, Step{Cost: 5, Allowed: true, Remaining: 0, Reset: time.Minute}), // 9 within 1µs+: the boundary burst
					denied(0, 6, 0, ratelimit.Never),
				},
			),
		},
		{
			// Clock-aligned: the window is the minute of the clock, not of the
			// first request. At 59.5s past a boundary 3 pass, the 4th waits
			// exactly until the boundary, where the count is fresh.
			Name:  "FixedWindowClock/limit3-window1m",
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 3, Interval: time.Minute},
			Steps: []Step{
				{Advance: 59500 * time.Millisecond, Cost: 0, Allowed: true, Remaining: 3, Reset: 0},
				ok(2, 500*time.Millisecond),
				ok(1, 500*time.Millisecond),
				ok(0, 500*time.Millisecond),
				{Cost: 1, Remaining: 0, Reset: 500 * time.Millisecond, RetryAfter: 500 * time.Millisecond},
				{Cost: 0, Allowed: true, Remaining: 0, Reset: 500 * time.Millisecond},
				denied(500*time.Millisecond-us, 1, 0, us),
				after(us, ok(2, time.Minute)), // the boundary: a fresh window
				{Advance: 20 * time.Second, Cost: 2, Allowed: true, Remaining: 0, Reset: 40 * time.Second},
				denied(0, 1, 0, 40*time.Second),
				denied(0, 4, 0, ratelimit.Never),
				denied(40*time.Second-us, 1, 0, us),
				after(us, Step{Cost: 3, Allowed: true, Remaining: 0, Reset: time.Minute}), // the boundary burst: 6 within 40s
				// Whole windows later nothing is left over.
				{Advance: 3*time.Minute + 15*time.Second, Cost: 0, Allowed: true, Remaining: 3, Reset: 0},
				ok(2, 45*time.Second),
			},
		},
		{
			// A 1h window starts on the hour, whenever the first request comes.
			Name:  "FixedWindowClock/limit2-window1h",
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 2, Interval: time.Hour},
			Steps: []Step{
				after(15*time.Minute, ok(1, 45*time.Minute)),
				after(30*time.Minute, ok(0, 15*time.Minute)),
				denied(0, 1, 0, 15*time.Minute),
				after(15*time.Minute, ok(1, time.Hour)),
			},
		},
		{
			// Documented: a true rolling window, no boundary burst.
			Name:  "SlidingWindowLog/limit3-window10s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 3, Interval: 10 * time.Second},
			Steps: []Step{
				ok(2, 10*time.Second),
				after(time.Second, ok(1, 10*time.Second)),
				after(time.Second, ok(0, 10*time.Second)),
				denied(3*time.Second, 1, 0, 5*time.Second),
				denied(5*time.Second-us, 1, 0, us),
				after(us, ok(0, 10*time.Second)), // the request at 0 left
				denied(0, 1, 0, time.Second),
				denied(0, 2, 0, 2*time.Second),
				after(time.Second, ok(0, 10*time.Second)),
				denied(0, 4, 0, ratelimit.Never),
			},
		},
		{
			// Exact at one instant too: 12 in the same microsecond, then no more.
			Name:  "SlidingWindowLog/limit12-burst",
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 12, Interval: time.Second},
			Steps: cat(
				burst(12, 0),
				[]Step{denied(0, 1, 0, time.Second), after(time.Second, Step{Cost: 12, Allowed: true, Remaining: 0, Reset: time.Second})},
			),
		},
		{
			// Documented: estimate = prev*(1-elapsed) + curr, deny when >= limit.
			Name:  "SlidingWindowCounter/limit10-window1m",
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 10, Interval: time.Minute},
			Steps: cat(
				[]Step{ok(9, 2*time.Minute)},
				burst(9, 0),
				[]Step{
					// At the next window's start the estimate is still 10; 1µs later 9.
					denied(0, 1, 0, time.Minute+us),
					// Half way through the next window: 10*0.5 = 5 counted.
					{Advance: 90 * time.Second, Cost: 0, Allowed: true, Remaining: 5, Reset: 30 * time.Second},
					after(0, ok(4, 90*time.Second)),
					{Cost: 4, Allowed: true, Remaining: 0, Reset: 90 * time.Second},
					denied(0, 1, 0, us), // the weight drops just after half way
					after(us, ok(0, 90*time.Second-us)),
					denied(0, 11, 0, ratelimit.Never),
				},
			),
		},
		{
			// Documented: leaky bucket policing, capacity 5, leak 1 per second:
			// retry = (level+1-capacity)/rate.
			Name:  "LeakyBucket/capacity5-leak1per1s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.LeakyBucket, Capacity: 5, Rate: 1, Interval: time.Second},
			Steps: cat(
				[]Step{ok(4, time.Second)},
				burst(3, 1),
				[]Step{
					ok(0, 5*time.Second),
					denied(0, 1, 0, time.Second),
					denied(500*time.Millisecond, 2, 0, 1500*time.Millisecond),
					after(500*time.Millisecond, ok(0, 5*time.Second)),
					after(10*time.Second, Step{Cost: 5, Allowed: true, Remaining: 0, Reset: 5 * time.Second}),
					denied(0, 6, 0, ratelimit.Never),
				},
			),
		},
		{
			// GCRA: 10 per second with a burst of 5.
			Name:  "GCRA/rate10per1s-burst5",
			Limit: ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 5, Rate: 10, Interval: time.Second},
			Steps: cat(
				[]Step{ok(4, 100*time.Millisecond)},
				burst(4, 0),
				[]Step{
					denied(0, 1, 0, 100*time.Millisecond),
					denied(100*time.Millisecond-us, 1, 0, us),
					after(us, ok(0, 500*time.Millisecond)),
					denied(50*time.Millisecond, 3, 0, 250*time.Millisecond),
					{Advance: time.Second, Cost: 0, Allowed: true, Remaining: 5, Reset: 0},
					denied(0, 6, 5, ratelimit.Never),
				},
			),
		},
		// Charged always (usage reported after the fact): a cost that does
		// not fit is counted all the same, up to twice the limit, and a
		// check of cost 0 is denied until the debt has gone.
		{
			Name:  "FixedWindow/charge-always-limit1000-window1h",
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Hour},
			Steps: []Step{
				admitted(600, 400, time.Hour),
				charged(0, 600, time.Hour, time.Hour),
				denied(0, 0, 0, time.Hour),
				charged(10*time.Minute, 1500, ratelimit.Never, 50*time.Minute),
				denied(0, 0, 0, 50*time.Minute),
				after(50*time.Minute, ok(999, time.Hour)),
			},
		},
		{
			Name:  "TokenBucket/charge-always-capacity10-refill1per1s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Second},
			Steps: []Step{
				admitted(4, 6, 4*time.Second),
				charged(0, 10, 14*time.Second, 14*time.Second), // 6 - 10: 4 tokens in debt
				denied(0, 0, 0, 4*time.Second),
				{Advance: 4 * time.Second, Cost: 0, Allowed: true, Remaining: 0, Reset: 10 * time.Second},
				charged(0, 100, ratelimit.Never, 20*time.Second), // down to -capacity
				denied(0, 0, 0, 10*time.Second),
			},
		},
		{
			// 1 unit of level = 100ms; the bucket holds 5, twice that in debt.
			Name:  "GCRA/charge-always-rate10per1s-burst5",
			Limit: ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 5, Rate: 10, Interval: time.Second},
			Steps: []Step{
				admitted(5, 0, 500*time.Millisecond),
				charged(0, 3, 600*time.Millisecond, 800*time.Millisecond),
				denied(0, 0, 0, 300*time.Millisecond),
				charged(0, 5, time.Second, time.Second), // capped at 10
				after(time.Second, Step{Cost: 5, Allowed: true, Remaining: 0, Reset: 500 * time.Millisecond}),
			},
		},
		{
			Name:  "SlidingWindowLog/charge-always-limit3-window10s",
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 3, Interval: 10 * time.Second},
			Steps: []Step{
				admitted(2, 1, 10*time.Second),
				charged(time.Second, 3, 10*time.Second, 10*time.Second), // the charged entry must leave too
				denied(0, 0, 0, 9*time.Second),
				{Advance: 9 * time.Second, Cost: 0, Allowed: true, Remaining: 0, Reset: time.Second},
			},
		},
		{
			// curr 16 of 10: cost 8 fits once floor(16*(w-e)/w) <= 2 in the
			// next window, e > 13w/16; cost 0 once it is <= 10, e > 5w/16.
			Name:  "SlidingWindowCounter/charge-always-limit10-window1m",
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 10, Interval: time.Minute},
			Steps: []Step{
				admitted(8, 2, 2*time.Minute),
				charged(0, 8, time.Minute+48750001*us, 2*time.Minute),
				denied(0, 0, 0, time.Minute+18750001*us),
			},
		},
	}
}

// RunExamples runs every example against a store built by newStore, each on
// a fresh key and a clock aligned to an hour. newStore gets the clock the
// store must read.
func RunExamples(t *testing.T, newStore func(t *testing.T, clock *Clock) ratelimit.Store) {
	for i, ex := range Examples() {
		t.Run(ex.Name, func(t *testing.T) {
			clock := FutureClock()
			store := newStore(t, clock)
			key := ratelimit.Key("examples", "seed", fmt.Sprint(time.Now().UnixNano()), fmt.Sprint(i))
			var dec ratelimit.Decision
			for n, st := range ex.Steps {
				clock.Advance(st.Advance)
				req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: ex.Limit, Cost: st.Cost, ChargeAlways: st.Always}}}
				if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
					t.Fatalf("step %d: %v", n, err)
				}
				r := dec.Results[0]
				bad := r.Allowed != st.Allowed || dec.Allowed != st.Allowed || r.Remaining != st.Remaining ||
					(st.Reset != Skip && r.Reset != st.Reset) ||
					(!st.Allowed && st.RetryAfter != Skip && r.RetryAfter != st.RetryAfter) ||
					(st.Allowed && r.RetryAfter != 0)
				if bad {
					t.Fatalf("step %d (advance %s, cost %d): got %+v, want allowed=%v remaining=%d reset=%s retry=%s",
						n, st.Advance, st.Cost, r, st.Allowed, st.Remaining, st.Reset, st.RetryAfter)
				}
			}
		})
	}
}
