package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// Never is the engine's RetryAfter for a cost above the capacity.
const Never = -1

// State is one limit's stored state. The zero value is "untouched", and so
// is a state of another algorithm (a limit whose algorithm was changed
// starts over). Fields per algorithm:
//
//	TokenBucket          A = tokens (below 0 when charged always), B = time of the last refill step
//	FixedWindow          A = count, B = window start
//	FixedWindowClock     A = count, B = window start (a multiple of Interval)
//	Calendar             A = count, B = window end (the next period's local midnight)
//	SlidingWindowCounter A = window index (time/window), B = current count, C = previous count
//	LeakyBucket, GCRA    A = level in scaled units (Interval per unit), B = time of the level
//	SlidingWindowLog     Log
//	Concurrency          B = time of the latest admission, Holds (in order of their ends)
//
// For GCRA the theoretical arrival time is B + A/Rate.
type State struct {
	Alg     ratelimit.Algorithm
	A, B, C int64
	Log     []LogEntry
	Holds   []Hold
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
	// cost (equal to Remaining and Reset when !Allowed or cost is 0, except
	// for a cost charged all the same: see CheckAlways). ResetAfter is also
	// the TTL of the consumed state.
	RemainingAfter, ResetAfter int64
	// Banned: denied because the entry's bucket is banned (see Banned).
	Banned bool
	// Ban is the length of the ban the call issued to the entry's bucket
	// (µs; 0: none); stores set it after the decision.
	Ban int64
	// BanLeft is how long the bucket stays banned from the call on (µs):
	// the ban in force (Banned) or the one issued (Ban); 0 when none and
	// for a shadow bucket.
	BanLeft int64
	// Reserved and ReservedAfter are the units of the limit's live
	// reservations before and after consuming (ApplyReserved; 0 for an
	// entry that does not reserve); Settled, the reservation a Settle
	// replaced (0: none).
	Reserved, ReservedAfter, Settled int64
	// Dup: the holder's admission was a duplicate of its live
	// reservation, or its Settle a duplicate's (ApplyReserved): the
	// reservations record it whatever the decision.
	Dup bool
}

// Check evaluates cost units against state s at time now (µs, >= 0);
// p must come from Compile.
// It returns the verdict and the state after consuming, which is only
// meaningful when v.Allowed and cost > 0; its TTL is v.ResetAfter. s is not
// modified, but for SlidingWindowLog next.Log may use s.Log's spare
// capacity (so a consumed request appends in amortized O(1)): next is valid
// until the next Check on s, so store it in place of s or drop it.
func Check(p Params, s *State, now, cost int64) (v Verdict, next State) {
	return check(p, s, now, cost, false)
}

// CheckAlways is Check for an entry that charges always
// (ratelimit.Entry.ChargeAlways): when the cost does not fit, v denies,
// and next is the state charged all the same, over the limit by at most
// one Capacity (p's limit must pass Limit.ValidateDebt); v.RemainingAfter
// and v.ResetAfter then describe that state, and next is meaningful
// whenever cost > 0.
func CheckAlways(p Params, s *State, now, cost int64) (v Verdict, next State) {
	return check(p, s, now, cost, true)
}

func check(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	var st State
	if s != nil && s.Alg == p.Alg {
		st = *s
	}
	switch p.Alg {
	case ratelimit.TokenBucket:
		v, next = tokenBucket(p, &st, now, cost, always)
	case ratelimit.FixedWindow:
		v, next = fixedWindow(p, &st, now, cost, always)
	case ratelimit.FixedWindowClock:
		v, next = fixedWindowClock(p, &st, now, cost, always)
	case ratelimit.Calendar:
		v, next = calendar(p, &st, now, cost, always)
	case ratelimit.SlidingWindowLog:
		v, next = slidingLog(p, &st, now, cost, always)
	case ratelimit.SlidingWindowCounter:
		v, next = slidingCounter(p, &st, now, cost, always)
	case ratelimit.LeakyBucket, ratelimit.GCRA:
		v, next = meter(p, &st, now, cost, always)
	case ratelimit.Concurrency:
		// Anonymous holds: Apply passes an entry's holder.
		v, next = concurrency(p, &st, now, cost, "")
	default:
		// Params not made by Compile: a limit that cannot be evaluated admits nothing.
		deny(&v, Never)
		return v, State{}
	}
	if always && !v.Allowed && next.Alg != 0 && v.RetryAfter != Never {
		// Charged all the same: the same cost fits only once the charge
		// has drained too. (The charged state denies it: it holds more
		// than the state that already did.)
		after, _ := check(p, &next, now, cost, false)
		v.RetryAfter = after.RetryAfter
	}
	return v, next
}

// deny fills v for a cost that does not fit; retry is µs or Never.
func deny(v *Verdict, retry int64) {
	v.Allowed = false
	v.RetryAfter = retry
	v.RemainingAfter, v.ResetAfter = v.Remaining, v.Reset
}

// charged records in v, which denies, the state a forced charge left:
// nothing remains (the cost did not fit), and it is untouched again after
// resetAfter µs.
func charged(v *Verdict, resetAfter int64) {
	v.RemainingAfter, v.ResetAfter = 0, resetAfter
}

// allow fills v for a cost that fits.
func allow(v *Verdict, remainingAfter, resetAfter int64) {
	v.Allowed = true
	v.RetryAfter = 0
	v.RemainingAfter, v.ResetAfter = remainingAfter, resetAfter
}
