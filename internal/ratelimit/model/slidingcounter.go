package model

import (
	"math"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// slidingCounter: two epoch-aligned windows blended by weight:
// estimate = floor(prev*(window-elapsed)/window) + curr, and a cost fits when
// estimate+cost <= Capacity (for cost 1 this is the usual
// "estimate < limit"). The state is untouched again at the end of the window
// after the current one. Charged always, the current count goes up to
// twice the limit.
func slidingCounter(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	limit, window := p.Capacity, p.Interval
	k, curr, prev := now/window, int64(0), int64(0)
	if s.Alg == ratelimit.SlidingWindowCounter {
		k, curr, prev = rolled(p, s, now)
	}
	start := k * window
	elapsed := max(now-start, 0)
	est := weighted(prev, window, elapsed) + curr
	resetOf := func(curr int64) int64 {
		switch {
		case curr > 0:
			return start + 2*window - now
		case prev > 0:
			return start + window - now
		}
		return 0
	}
	v.Remaining, v.Reset = max(limit-est, 0), resetOf(curr)
	switch {
	case cost > limit:
		deny(&v, Never)
	case est+cost <= limit:
		allow(&v, max(limit-est-cost, 0), resetOf(curr+cost))
		next = State{Alg: ratelimit.SlidingWindowCounter, A: k, B: curr + cost, C: prev}
	default:
		deny(&v, swcRetryAt(limit, window, start, elapsed, curr, prev, cost)-now)
	}
	if always && cost > 0 && !v.Allowed {
		curr = max(curr, min(curr+cost, 2*limit))
		charged(&v, resetOf(curr))
		next = State{Alg: ratelimit.SlidingWindowCounter, A: k, B: curr, C: prev}
	}
	return v, next
}

// rolled is sliding counter state s brought to now: the window index and
// the current and previous windows' counts.
func rolled(p Params, s *State, now int64) (k, curr, prev int64) {
	k = now / p.Interval
	switch sk := s.A; {
	case k == sk:
		curr, prev = s.B, s.C
	case k == sk+1:
		prev = s.B
	case k < sk: // clock stepped back: stay in the stored window
		k, curr, prev = sk, s.B, s.C
	}
	return k, curr, prev
}

// weighted is floor(n*(window-elapsed)/window) in doubles, in the operation
// order the Lua library uses. The explicit conversions stop the compiler
// from fusing the multiply into a multiply-add.
func weighted(n, window, elapsed int64) int64 {
	if n == 0 {
		return 0
	}
	prod := float64(float64(n) * float64(window-elapsed))
	return int64(math.Floor(prod / float64(window)))
}

// swcRetryAt is the earliest time a denied cost fits: later in the current
// window (as prev's weight decays), in the next window (where curr becomes
// prev), or at the start of the one after, where the estimate is 0.
func swcRetryAt(limit, window, start, elapsed, curr, prev, cost int64) int64 {
	if room := limit - curr - cost; room >= 0 && weighted(prev, window, window-1) <= room {
		e := firstAtMost(elapsed+1, window-1, room, func(e int64) int64 { return weighted(prev, window, e) })
		return start + e
	}
	if room := limit - cost; weighted(curr, window, window-1) <= room {
		e := firstAtMost(0, window-1, room, func(e int64) int64 { return weighted(curr, window, e) })
		return start + window + e
	}
	return start + 2*window
}

// firstAtMost is the smallest e in [lo, hi] with f(e) <= room, for f
// non-increasing and f(hi) <= room.
func firstAtMost(lo, hi, room int64, f func(int64) int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if f(mid) <= room {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
