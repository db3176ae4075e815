package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// Never is the engine's RetryAfter for a cost above the capacity.
const Never = -1

// State is one limit's stored state. The zero value is "untouched", and so
// is a state of another algorithm (a limit whose algorithm was changed
// starts over). Fields per algorithm:
//
//	TokenBucket          A = tokens, B = time of the last refill step
//	FixedWindow          A = count, B = window start
//	FixedWindowClock     A = count, B = window start (a multiple of Interval)
//	SlidingWindowCounter A = window index (time/window), B = current count, C = previous count
//	LeakyBucket, GCRA    A = level in scaled units (Interval per unit), B = time of the level
//	SlidingWindowLog     Log
//
// For GCRA the theoretical arrival time is B + A/Rate.
type State struct {
	Alg     ratelimit.Algorithm
	A, B, C int64
	Log     []LogEntry
}

// LogEntry is one admitted request of a sliding window log.
type LogEntry struct {
	At   int64 // admission time, µs
	Cost int64
	End  int64 // cumulative cost of the log up to and including this entry
}

// Verdict is one limit's evaluation at one instant, before the request's
// decision is known. All durations are µs.
type Verdict struct {
	// Allowed: cost fits now.
	Allowed bool
	// Remaining and Reset describe the state if nothing is consumed:
	// units of cost 1 admissible now, and time until the state is untouched.
	Remaining, Reset int64
	// RetryAfter, when !Allowed: time until the same cost fits, or Never.
	// 0 when Allowed.
	RetryAfter int64
	// RemainingAfter and ResetAfter describe the state after consuming the
	// cost (equal to Remaining and Reset when !Allowed or cost is 0).
	// ResetAfter is also the TTL of the consumed state.
	RemainingAfter, ResetAfter int64
}

// Check evaluates cost units against state s at time now (µs, >= 0);
// p must come from Compile.
// It returns the verdict and the state after consuming, which is only
// meaningful when v.Allowed and cost > 0; its TTL is v.ResetAfter. s is not
// modified, but for SlidingWindowLog next.Log may use s.Log's spare
// capacity (so a consumed request appends in amortized O(1)): next is valid
// until the next Check on s, so store it in place of s or drop it.
func Check(p Params, s *State, now, cost int64) (v Verdict, next State) {
	var st State
	if s != nil && s.Alg == p.Alg {
		st = *s
	}
	switch p.Alg {
	case ratelimit.TokenBucket:
		return tokenBucket(p, &st, now, cost)
	case ratelimit.FixedWindow:
		return fixedWindow(p, &st, now, cost)
	case ratelimit.FixedWindowClock:
		return fixedWindowClock(p, &st, now, cost)
	case ratelimit.SlidingWindowLog:
		return slidingLog(p, &st, now, cost)
	case ratelimit.SlidingWindowCounter:
		return slidingCounter(p, &st, now, cost)
	case ratelimit.LeakyBucket, ratelimit.GCRA:
		return meter(p, &st, now, cost)
	}
	// Params not made by Compile: a limit that cannot be evaluated admits nothing.
	deny(&v, Never)
	return v, State{}
}

// deny fills v for a cost that does not fit; retry is µs or Never.
func deny(v *Verdict, retry int64) {
	v.Allowed = false
	v.RetryAfter = retry
	v.RemainingAfter, v.ResetAfter = v.Remaining, v.Reset
}

// allow fills v for a cost that fits.
func allow(v *Verdict, remainingAfter, resetAfter int64) {
	v.Allowed = true
	v.RetryAfter = 0
	v.RemainingAfter, v.ResetAfter = remainingAfter, resetAfter
}
