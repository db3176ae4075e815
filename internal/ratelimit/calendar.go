package ratelimit

import (
	"fmt"
	"sync"
	"time"

	// Zone data is compiled in: a container image without /usr/share/zoneinfo
	// (distroless, scratch) knows every IANA zone all the same.
	_ "time/tzdata"
)

// Period is the calendar unit of a Calendar limit's windows. The zero
// value is invalid.
type Period uint8

// The calendar periods. Their values are no part of any stored format.
const (
	// Day: from local midnight to the next (23 or 25 hours on a day
	// daylight saving time starts or ends).
	Day Period = iota + 1
	// Week: ISO weeks, from Monday 00:00 local time to the next.
	Week
	// Month: from 00:00 on the 1st to 00:00 on the 1st of the next month.
	Month
	// Year: from 00:00 on 1 January to the next.
	Year
)

// Periods lists every valid period, shortest first.
var Periods = []Period{Day, Week, Month, Year}

var periodNames = [...]string{Day: "Day", Week: "Week", Month: "Month", Year: "Year"}

// nominal is each period's usual length: what RateLimit-Policy's "w" and
// Envoy's RLS units name, and what a Calendar Limit's Interval holds.
var nominal = [...]time.Duration{
	Day:   24 * time.Hour,
	Week:  7 * 24 * time.Hour,
	Month: 30 * 24 * time.Hour,
	Year:  365 * 24 * time.Hour,
}

// Valid reports whether p is one of the four periods.
func (p Period) Valid() bool { return p >= Day && p <= Year }

// String returns the period's name as the API spells it ("Day").
func (p Period) String() string {
	if p.Valid() {
		return periodNames[p]
	}
	return fmt.Sprintf("Period(%d)", uint8(p))
}

// Nominal is the period's usual length (a month of 30 days, a year of
// 365): a Calendar Limit's Interval, never used to find a window's end.
func (p Period) Nominal() time.Duration { return nominal[p] }

// ParsePeriod is the inverse of String.
func ParsePeriod(s string) (Period, error) {
	for _, p := range Periods {
		if periodNames[p] == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown period %q", s)
}

// CalendarLimit is the Limit of a Calendar quota: capacity units per
// period in zone.
func CalendarLimit(capacity int64, period Period, zone *time.Location) Limit {
	l := Limit{Algorithm: Calendar, Capacity: capacity, Period: period, Zone: zone}
	if period.Valid() {
		l.Interval = period.Nominal()
	}
	return l
}

var zones sync.Map // name -> *time.Location

// LoadZone returns the IANA zone of that name ("" and "UTC" are UTC) from
// the zone data compiled into the binary. A name is loaded once: every
// limit in one zone shares its *time.Location, so Limits of the same
// quota compare equal.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		name = "UTC"
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	actual, _ := zones.LoadOrStore(name, loc)
	return actual.(*time.Location), nil
}

// CalendarWindows returns the starts, in µs since the Unix epoch, of four
// consecutive windows of period in zone: the one before the window that
// holds at (µs), that window, and the two after it. The zone's rules
// (offsets, daylight saving time) are applied here, in Go; the stores'
// clocks then pick among these boundaries.
func CalendarWindows(period Period, zone *time.Location, at int64) [4]int64 {
	t := time.UnixMicro(at).In(zone)
	y, m, d := t.Date()
	var start func(n int) time.Time
	switch period {
	case Day:
		start = func(n int) time.Time { return time.Date(y, m, d+n, 0, 0, 0, 0, zone) }
	case Week:
		monday := d - (int(t.Weekday())+6)%7
		start = func(n int) time.Time { return time.Date(y, m, monday+7*n, 0, 0, 0, 0, zone) }
	case Month:
		start = func(n int) time.Time { return time.Date(y, m+time.Month(n), 1, 0, 0, 0, 0, zone) }
	default:
		start = func(n int) time.Time { return time.Date(y+n, 1, 1, 0, 0, 0, 0, zone) }
	}
	return [4]int64{start(-1).UnixMicro(), start(0).UnixMicro(), start(1).UnixMicro(), start(2).UnixMicro()}
}
