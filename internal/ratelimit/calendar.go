package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit/zoneinfo"
)

// Period is the calendar unit of a Calendar limit's windows. The zero
// value is invalid.
type Period uint8

// The calendar periods. Their values are no part of any stored format.
const (
	// Day: from local midnight to the next (23 or 25 hours on a day
	// daylight saving time starts or ends). Every period starts at the
	// first instant of its first day: where clocks are set forward over
	// midnight (America/Santiago), at the end of that gap (01:00); where
	// they are set back over it, at the first of the two midnights.
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
// the zone database compiled into the binary (package zoneinfo), never
// the host's: the rules are the same on every host and in every image,
// and the host's own zone (Local, localtime), its copies of the database
// (posix/..., right/...) and paths are refused. A name is loaded once:
// every limit in one zone shares its *time.Location, so Limits of the
// same quota compare equal.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := zoneinfo.Load(name)
	if err != nil {
		return nil, zoneError(name, err)
	}
	actual, _ := zones.LoadOrStore(name, loc)
	return actual.(*time.Location), nil
}

// ZoneError is LoadZone's error: the name, and why it is no zone.
type ZoneError struct {
	Name   string
	Reason string // what to write instead, for a person
	Err    error
}

func (e *ZoneError) Error() string { return fmt.Sprintf("time zone %q: %s", e.Name, e.Reason) }
func (e *ZoneError) Unwrap() error { return e.Err }

// zoneError says why name is no zone, and what to write instead.
func zoneError(name string, err error) *ZoneError {
	e := &ZoneError{Name: name, Err: err, Reason: "must be a time zone of the IANA database " + zoneinfo.Version + ", such as Europe/Berlin, America/New_York or UTC"}
	switch {
	case !errors.Is(err, zoneinfo.ErrUnknown):
		e.Reason = err.Error()
	case name == "Local" || name == "localtime":
		e.Reason = "the host's own zone differs from host to host: name an IANA zone, such as Europe/Berlin"
	case strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/"):
		e.Reason = fmt.Sprintf("a host's copy of the database, not an IANA name: name the zone without %q", name[:strings.IndexByte(name, '/')+1])
	}
	return e
}

// ZoneNames lists the zones LoadZone knows, sorted.
func ZoneNames() []string { return zoneinfo.Names() }

// CalendarWindows returns the starts, in µs since the Unix epoch, of four
// consecutive windows of period in zone: the one before the window that
// holds at (µs), that window, and the two after it. The zone's rules
// (offsets, daylight saving time) are applied here, in Go; the stores'
// clocks then pick among these boundaries. A period the zone skipped
// whole (Pacific/Apia's 30 December 2011) is no window: the four are
// never empty.
func CalendarWindows(period Period, zone *time.Location, at int64) [4]int64 {
	k := windowsKey{zone, period}
	if v, ok := lastWindows.Load(k); ok {
		if w := v.(*[4]int64); w[1] <= at && at < w[2] {
			return *w
		}
	}
	w := calendarWindows(period, zone, at)
	lastWindows.Store(k, &w)
	return w
}

// lastWindows holds, by zone and period, the windows CalendarWindows found
// last: the same for every instant of their second window, which is where
// nearly every request falls. Finding them takes a few µs (the zone data
// is compact: the offsets of most dates come from a rule, evaluated on each
// lookup); every request reads them. The zones are LoadZone's, so the keys
// are bounded by the zone database.
var lastWindows sync.Map // windowsKey -> *[4]int64, never changed once stored

type windowsKey struct {
	zone   *time.Location
	period Period
}

func calendarWindows(period Period, zone *time.Location, at int64) [4]int64 {
	t := time.UnixMicro(at).In(zone)
	y, m, d := t.Date()
	var first func(n int) int64 // the start of the nth period from t's
	switch period {
	case Day:
		first = func(n int) int64 { return dayStart(y, m, d+n, zone) }
	case Week:
		monday := d - (int(t.Weekday())+6)%7
		first = func(n int) int64 { return dayStart(y, m, monday+7*n, zone) }
	case Month:
		first = func(n int) int64 { return dayStart(y, m+time.Month(n), 1, zone) }
	default:
		first = func(n int) int64 { return dayStart(y+n, 1, 1, zone) }
	}
	// at's own period may have started before at's local date says (a
	// clock set back over midnight reads the day before again).
	n := 0
	for first(n+1) <= at {
		n++
	}
	w := [4]int64{0, first(n), first(n + 1), 0}
	for k := n - 1; ; k-- {
		if w[0] = first(k); w[0] < w[1] {
			break
		}
	}
	for k := n + 2; ; k++ {
		if w[3] = first(k); w[3] > w[2] {
			break
		}
	}
	return w
}

// dayStart is the first instant, in µs, whose local time in zone is
// y-m-d 00:00 (normalised as time.Date does) or later. time.Date(y, m, d,
// 0, 0, 0, 0, zone) answers that where the zone's offset holds still
// around midnight; where it does not, midnight may not exist (time.Date
// then answers 23:00 of the day before in America/Santiago) or come twice,
// and the instant is found by walking the offsets from one surely earlier
// (offsets are within ±26 hours). Time.ZoneBounds is not used: its bounds
// can be wrong for the dates a zone's rules extend to.
func dayStart(y int, m time.Month, d int, zone *time.Location) int64 {
	midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).UnixMicro() // local midnight, read as if UTC
	lo, hi := midnight-zoneMargin, midnight+zoneMargin
	g := time.Date(y, m, d, 0, 0, 0, 0, zone).UnixMicro()
	if o := offsetAt(zone, g); o == offsetAt(zone, lo) && g+o == midnight {
		return g
	}
	// Within one offset, local time runs with UTC: the first instant at
	// or after midnight is midnight at that offset, or the offset's start.
	for t, o := lo, offsetAt(zone, lo); ; {
		end := nextOffset(zone, t, o, hi)
		if c := max(t, midnight-o); c < end || end == hi {
			return c
		}
		t, o = end, offsetAt(zone, end)
	}
}

// zoneMargin is more than any zone's offset from UTC, in µs.
const zoneMargin = 27 * int64(time.Hour/time.Microsecond)

// offsetAt is zone's offset from UTC at t, in µs.
func offsetAt(zone *time.Location, t int64) int64 {
	_, o := time.UnixMicro(t).In(zone).Zone()
	return int64(o) * 1e6
}

// nextOffset is the first instant after t, and before hi, at which zone's
// offset is no longer o (hi when there is none): found hour by hour, then
// by bisection. Zones change their offset hours apart at the least.
func nextOffset(zone *time.Location, t, o, hi int64) int64 {
	const hour = int64(time.Hour / time.Microsecond)
	a := t
	for b := min(a+hour, hi); ; b = min(a+hour, hi) {
		if offsetAt(zone, b) != o {
			for b-a > 1 {
				if mid := a + (b-a)/2; offsetAt(zone, mid) == o {
					a = mid
				} else {
					b = mid
				}
			}
			return b
		}
		if b == hi {
			return hi
		}
		a = b
	}
}
