package model

import (
	"sort"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Refund gives n units back to state s at time now (ratelimit.Request's
// Refund): each algorithm first brings the state to now as Check would,
// then takes the units off what it holds, never below untouched:
//
//	TokenBucket          tokens + n, at most the capacity
//	FixedWindow(Clock)   count - n, at least 0, while the window lasts
//	Calendar             the same
//	SlidingWindowCounter the current window's count first, then the previous one's
//	LeakyBucket, GCRA    level - n units, at least 0
//	SlidingWindowLog     the newest entries still in the window lose n units
//	Concurrency          nothing: a refund of what is held names its holder (Apply)
//
// So a refund raises a limit's room by at most n, which is what keeps a
// lease's bound (package lease) when its unused units come back. v holds
// the figures after the refund (allowed, with the After fields equal to
// the others); next is the state to store, with Alg 0 when nothing
// changed (an untouched state, another algorithm's, or n of 0). Like
// Check, s is not modified.
func Refund(p Params, s *State, now, n int64) (v Verdict, next State) {
	var st State
	if s != nil && s.Alg == p.Alg {
		st = *s
	}
	if n > 0 && st.Alg != 0 {
		switch p.Alg {
		case ratelimit.TokenBucket:
			next = refundTokens(p, &st, now, n)
		case ratelimit.FixedWindow:
			if st.A > 0 && now < st.B+p.Interval {
				next = State{Alg: p.Alg, A: max(st.A-n, 0), B: st.B}
			}
		case ratelimit.FixedWindowClock:
			if k := now / p.Interval; st.A > 0 && st.B/p.Interval >= k {
				next = State{Alg: p.Alg, A: max(st.A-n, 0), B: st.B / p.Interval * p.Interval}
			}
		case ratelimit.Calendar:
			if st.A > 0 && now < st.B {
				next = State{Alg: p.Alg, A: max(st.A-n, 0), B: st.B}
			}
		case ratelimit.SlidingWindowCounter:
			next = refundCounter(p, &st, now, n)
		case ratelimit.LeakyBucket, ratelimit.GCRA:
			next = refundMeter(p, &st, now, n)
		case ratelimit.SlidingWindowLog:
			next = refundLog(p, &st, now, n)
		}
	}
	after := &st
	if next.Alg != 0 {
		after = &next
	}
	v, _ = Check(p, after, now, 0)
	v.Allowed, v.RetryAfter = true, 0
	v.RemainingAfter, v.ResetAfter = v.Remaining, v.Reset
	return v, next
}

func refundTokens(p Params, s *State, now, n int64) State {
	tokens, last := refilled(p, s, now)
	if tokens >= p.Capacity {
		return State{} // full: nothing to give back
	}
	return State{Alg: ratelimit.TokenBucket, A: min(tokens+n, p.Capacity), B: last}
}

func refundCounter(p Params, s *State, now, n int64) State {
	k, curr, prev := rolled(p, s, now)
	if curr <= 0 && prev <= 0 {
		return State{}
	}
	fromCurr := min(curr, n)
	curr, prev = curr-fromCurr, max(prev-(n-fromCurr), 0)
	if curr == 0 && prev == 0 {
		// Empty: now's window, as untouched (a stored window ahead of
		// now, after the clock stepped back, would not read as empty).
		k = now / p.Interval
	}
	return State{Alg: ratelimit.SlidingWindowCounter, A: k, B: curr, C: prev}
}

func refundMeter(p Params, s *State, now, n int64) State {
	level, at := drained(p, s, now)
	if level == 0 {
		return State{}
	}
	// n*Interval may not fit: compare in units first.
	if n >= ceilDiv(level, p.Interval) {
		// Drained: at now, as untouched (a time ahead of now, after the
		// clock stepped back, would not read as drained).
		level, at = 0, now
	} else {
		level -= n * p.Interval
	}
	return State{Alg: p.Alg, A: level, B: at}
}

// refundLog takes n units off the newest entries in the window (the
// oldest keep their times, so no entry leaves the window later than it
// would have). The log is copied: s.Log stays as it was.
func refundLog(p Params, s *State, now, n int64) State {
	cut := now - p.Interval
	i := sort.Search(len(s.Log), func(i int) bool { return s.Log[i].At > cut })
	live := s.Log[i:]
	if len(live) == 0 {
		return State{}
	}
	log := append([]LogEntry(nil), live...)
	for n > 0 && len(log) > 0 {
		last := &log[len(log)-1]
		if last.Cost > n {
			last.Cost -= n
			last.End -= n
			break
		}
		n -= last.Cost
		log = log[:len(log)-1]
	}
	return State{Alg: ratelimit.SlidingWindowLog, Log: log}
}
