package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// fixedWindow: a window of Interval opens with the first admitted request
// after the previous window ended (as an INCR+EXPIRE counter whose key's TTL
// is the window would), and holds at most Capacity units. Unlike such a
// counter, the window start is state, not a key TTL, and denied requests are
// not counted (unless charged always: then the count goes up to twice the
// limit).
func fixedWindow(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	limit, window := p.Capacity, p.Interval
	count, start := int64(0), now
	if s.Alg == ratelimit.FixedWindow && s.A > 0 && now < s.B+window {
		count, start = s.A, s.B
	}
	endsIn := func(c int64) int64 {
		if c == 0 {
			return 0
		}
		return start + window - now
	}
	v.Remaining, v.Reset = max(limit-count, 0), endsIn(count)
	switch {
	case cost > limit:
		deny(&v, Never)
	case count+cost <= limit:
		allow(&v, limit-count-cost, endsIn(count+cost))
		next = State{Alg: ratelimit.FixedWindow, A: count + cost, B: start}
	default:
		deny(&v, start+window-now)
	}
	if always && cost > 0 && !v.Allowed {
		count = max(count, min(count+cost, 2*limit))
		charged(&v, endsIn(count))
		next = State{Alg: ratelimit.FixedWindow, A: count, B: start}
	}
	return v, next
}
