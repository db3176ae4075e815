package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// fixedWindowClock: windows are the multiples of Interval since the Unix
// epoch, [k*Interval, (k+1)*Interval) with k = floor(now/Interval), the
// same for every key (envoyproxy/ratelimit's now/unit*unit), and each
// holds at most Capacity units. The state is the count and the start of
// the window it counts; it is untouched again when that window ends.
//
// A stored window later than now's (the clock stepped back) stays the
// window, as a time before the state's own is evaluated as that time. The
// stored start is read through its window index, so a state written under
// another window length (the limit was edited) still ends on a boundary of
// the current one. Times are below 2^52 µs and Interval at most
// MaxInterval, so the window's end stays below 2^53.
func fixedWindowClock(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	limit, window := p.Capacity, p.Interval
	k, count := now/window, int64(0)
	if s.Alg == ratelimit.FixedWindowClock && s.A > 0 {
		if sk := s.B / window; sk >= k {
			k, count = sk, s.A
		}
	}
	return clockWindow(ratelimit.FixedWindowClock, limit, k*window, (k+1)*window, count, now, cost, always)
}

// clockWindow decides a window on the clock, the same for every key
// (FixedWindowClock, Calendar), that ends at end and holds count units.
// The state written is alg's (count, mark), mark being what alg keeps to
// find the window again (FixedWindowClock its start, Calendar its end);
// it is untouched again at end.
func clockWindow(alg ratelimit.Algorithm, limit, mark, end, count, now, cost int64, always bool) (v Verdict, next State) {
	v.Remaining = max(limit-count, 0)
	if count > 0 {
		v.Reset = end - now
	}
	switch {
	case cost > limit:
		deny(&v, Never)
	case count+cost <= limit:
		resetAfter := v.Reset
		if count+cost > 0 {
			resetAfter = end - now
		}
		allow(&v, limit-count-cost, resetAfter)
		next = State{Alg: alg, A: count + cost, B: mark}
	default:
		deny(&v, end-now)
	}
	if always && cost > 0 && !v.Allowed { // charged over the limit, up to twice it
		count = max(count, min(count+cost, 2*limit))
		charged(&v, end-now)
		next = State{Alg: alg, A: count, B: mark}
	}
	return v, next
}
