package model

import (
	"sort"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// slidingLog: every admitted request is logged with its time and cost; a
// request fits when the cost logged in (now-Interval, now] plus its own is
// at most Capacity. An entry at time t leaves the window at t+Interval.
// Times in the log never decrease (a clock step back logs at the last time).
// The Lua library merges requests of the same µs into one log member; that
// changes no result, since they leave the window together. Charged always,
// a request that does not fit is logged all the same, with its cost cut so
// that the window holds at most twice the limit.
func slidingLog(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	limit, window := p.Capacity, p.Interval
	var live []LogEntry
	if s.Alg == ratelimit.SlidingWindowLog {
		cut := now - window
		i := sort.Search(len(s.Log), func(i int) bool { return s.Log[i].At > cut })
		live = s.Log[i:]
	}
	var total, base, lastAt int64
	if n := len(live); n > 0 {
		base = live[0].End - live[0].Cost
		total = live[n-1].End - base
		lastAt = live[n-1].At
		v.Reset = lastAt + window - now
	}
	v.Remaining = max(limit-total, 0)
	switch {
	case cost > limit:
		deny(&v, Never)
	case cost == 0 && total <= limit:
		allow(&v, limit-total, v.Reset) // logs nothing
	case total+cost <= limit:
		allow(&v, limit-total-cost, max(now, lastAt)+window-now)
		return v, logged(live, now, lastAt, cost)
	default:
		// The oldest entries must leave until total-left+cost <= limit.
		need := total + cost - limit
		j := sort.Search(len(live), func(j int) bool { return live[j].End-base >= need })
		deny(&v, live[j].At+window-now)
	}
	if c := min(cost, 2*limit-total); always && c > 0 && !v.Allowed {
		charged(&v, max(now, lastAt)+window-now)
		next = logged(live, now, lastAt, c)
	}
	return v, next
}

// logged is the log live with cost logged at now, or at lastAt, the time
// of its last entry, if that is later (times never decrease).
func logged(live []LogEntry, now, lastAt, cost int64) State {
	end := cost
	if n := len(live); n > 0 {
		end = live[n-1].End + cost
	}
	return State{Alg: ratelimit.SlidingWindowLog, Log: append(live, LogEntry{At: max(now, lastAt), Cost: cost, End: end})}
}
