package ratelimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// CalendarCase is one window of a calendar quota: [Start, End) in the
// limit's zone, as long as the calendar has it there.
type CalendarCase struct {
	Name       string
	Limit      ratelimit.Limit
	Start, End time.Time
	// Next is the end of the window after it.
	Next time.Time
}

// CalendarCases are the windows a calendar quota must count as the
// calendar has them, the first ones after from: every period in a zone
// with daylight saving time (Europe/Berlin), one with a 45-minute offset
// (Asia/Kathmandu), one with both (Pacific/Chatham) and one whose summer
// time starts at midnight (America/Santiago: that day starts at 01:00 and
// has 23 hours, the day before keeps its 24); in those with daylight
// saving time the days of 23 and 25 hours and the weeks that hold them; months
// of 28 or 29, 30 and 31 days; a year. The dates follow from, so a store
// whose expiry deadlines are absolute (Redis) can run them in the future.
func CalendarCases(from time.Time) []CalendarCase {
	var cases []CalendarCase
	add := func(zoneName string, period ratelimit.Period, what string, start time.Time) {
		zone := mustZone(zoneName)
		end, next := periodAfter(period, start.In(zone)), periodAfter(period, periodAfter(period, start.In(zone)))
		name := fmt.Sprintf("%s/%s/%s-%s", zoneName, period, start.In(zone).Format("2006-01-02"), what)
		cases = append(cases, CalendarCase{Name: name, Limit: ratelimit.CalendarLimit(2, period, zone), Start: start, End: end, Next: next})
	}
	for _, zoneName := range []string{"Europe/Berlin", "Asia/Kathmandu", "Pacific/Chatham", "America/Santiago"} {
		zone := mustZone(zoneName)
		for _, period := range ratelimit.Periods {
			start := time.UnixMicro(ratelimit.CalendarWindows(period, zone, from.UnixMicro())[2])
			add(zoneName, period, "next", start)
		}
		day := midnight(from.In(zone))
		for _, hours := range []int{23, 25} {
			if d, ok := dayOf(day, hours); ok {
				add(zoneName, ratelimit.Day, fmt.Sprintf("%dh", hours), d)
				add(zoneName, ratelimit.Day, fmt.Sprintf("before-%dh", hours), firstInstant(d.Year(), d.Month(), d.Day()-1, zone))
				monday := time.UnixMicro(ratelimit.CalendarWindows(ratelimit.Week, zone, d.UnixMicro())[1])
				add(zoneName, ratelimit.Week, fmt.Sprintf("%dh", 6*24+hours), monday)
			}
		}
	}
	berlin := mustZone("Europe/Berlin")
	month := time.Date(from.In(berlin).Year(), from.In(berlin).Month()+1, 1, 0, 0, 0, 0, berlin)
	seen := map[int]bool{}
	for len(seen) < 3 {
		days := month.AddDate(0, 1, -1).Day()
		key := days
		if days < 30 {
			key = 28 // February, of 28 or 29 days
		}
		if !seen[key] {
			seen[key] = true
			add("Europe/Berlin", ratelimit.Month, fmt.Sprintf("%dd", days), month)
		}
		month = month.AddDate(0, 1, 0)
	}
	return cases
}

func mustZone(name string) *time.Location {
	zone, err := ratelimit.LoadZone(name)
	if err != nil {
		panic(err) // the zone data is compiled in
	}
	return zone
}

// midnight is the first instant of t's local day.
func midnight(t time.Time) time.Time {
	return firstInstant(t.Year(), t.Month(), t.Day(), t.Location())
}

// firstInstant is the first instant of the local day y-m-d, found apart
// from the code under test: time.Date's midnight, or, where midnight does
// not exist (time.Date then answers the day before), the first minute
// whose local date is that day.
func firstInstant(y int, m time.Month, d int, zone *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	t := time.Date(y, m, d, 0, 0, 0, 0, zone)
	for ty, tm, td := t.Date(); time.Date(ty, tm, td, 0, 0, 0, 0, time.UTC).Before(want); ty, tm, td = t.Date() {
		t = t.Truncate(time.Minute).Add(time.Minute)
	}
	return t
}

// periodAfter is the start of the period after the one starting at start
// (the first instant of a day, a Monday, a 1st or a 1 January).
func periodAfter(p ratelimit.Period, start time.Time) time.Time {
	y, m, d := start.Date()
	switch p {
	case ratelimit.Day:
		d++
	case ratelimit.Week:
		d += 7
	case ratelimit.Month:
		m++
	default:
		y++
	}
	return firstInstant(y, m, d, start.Location())
}

// dayOf is the first local day after from that lasts hours, within two years.
func dayOf(from time.Time, hours int) (time.Time, bool) {
	for d := periodAfter(ratelimit.Day, from); d.Before(from.AddDate(2, 0, 0)); d = periodAfter(ratelimit.Day, d) {
		if periodAfter(ratelimit.Day, d).Sub(d) == time.Duration(hours)*time.Hour {
			return d, true
		}
	}
	return time.Time{}, false
}

// RunCalendar runs every CalendarCases(from) window through a store built
// by newStore on a clock of the case's own, each on a fresh key: a
// request 1µs before the window starts counts in the window before it,
// one at its start in it, with the reset at its end (the window's length,
// 23 or 25 hours on a daylight saving time change, 28 to 31 days for a
// month); 1µs before its end the quota is spent for 1µs more, and at its
// end the next window starts empty.
func RunCalendar(t *testing.T, from time.Time, newStore func(t *testing.T, clock *Clock) ratelimit.Store) {
	for i, c := range CalendarCases(from) {
		t.Run(c.Name, func(t *testing.T) {
			start := c.Start.UnixMicro()
			clock := NewClock(time.UnixMicro(start - 1))
			store := newStore(t, clock)
			key := ratelimit.Key("calendar", "seed", fmt.Sprint(time.Now().UnixNano()), fmt.Sprint(i))
			length, next := c.End.Sub(c.Start), c.Next.Sub(c.End)
			steps := []Step{
				{Cost: 2, Allowed: true, Remaining: 0, Reset: time.Microsecond}, // the window before
				{Cost: 1, RetryAfter: time.Microsecond, Reset: time.Microsecond},
				after(time.Microsecond, Step{Cost: 1, Allowed: true, Remaining: 1, Reset: length}),
				{Advance: length - time.Microsecond, Cost: 1, Allowed: true, Remaining: 0, Reset: time.Microsecond},
				{Cost: 1, RetryAfter: time.Microsecond, Reset: time.Microsecond},
				{Cost: 0, Allowed: true, Remaining: 0, Reset: time.Microsecond},
				after(time.Microsecond, Step{Cost: 1, Allowed: true, Remaining: 1, Reset: next}),
			}
			var dec ratelimit.Decision
			for n, st := range steps {
				clock.Advance(st.Advance)
				req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: c.Limit, Cost: st.Cost}}}
				if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
					t.Fatalf("step %d: %v", n, err)
				}
				if r := dec.Results[0]; r.Allowed != st.Allowed || r.Remaining != st.Remaining || r.Reset != st.Reset || (!st.Allowed && r.RetryAfter != st.RetryAfter) {
					t.Fatalf("step %d at %s (window %s..%s): got %+v, want allowed=%v remaining=%d reset=%s retry=%s",
						n, clock.Now().In(c.Limit.Zone).Format(time.RFC3339Nano), c.Start.In(c.Limit.Zone), c.End.In(c.Limit.Zone), r, st.Allowed, st.Remaining, st.Reset, st.RetryAfter)
				}
			}
		})
	}
}
