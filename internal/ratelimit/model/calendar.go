package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// calendar: the windows are the calendar's periods in the limit's zone
// (ratelimit.CalendarWindows), the same for every key, and each holds at
// most Capacity units, as FixedWindowClock's windows do. The state is the
// count and the end of the window it counts, and counts until that end:
// a state's window is its own whatever the clock does (after a step back
// across a boundary, the later window stays the window) and whatever the
// limit became (a count made under another zone or period lasts until
// its own window ends, then now's window starts empty).
func calendar(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	w := ratelimit.CalendarWindows(p.Period, p.Zone, now)
	count, end := calendarCount(s, now, w[2])
	return clockWindow(ratelimit.Calendar, p.Capacity, end, end, count, now, cost, always)
}

// calendarCount is what calendar state s holds at now, whose window ends
// at end: its count and its window's end while that lasts, else none and
// end.
func calendarCount(s *State, now, end int64) (int64, int64) {
	if s.Alg == ratelimit.Calendar && s.A > 0 && now < s.B {
		return s.A, s.B
	}
	return 0, end
}
