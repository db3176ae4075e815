package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCalendarWindows: each period's windows start at local midnight, on
// Monday, on the 1st and on 1 January, in zones with daylight saving time
// (days of 23 and 25 hours) and 45-minute offsets, whatever the instant
// inside the window.
func TestCalendarWindows(t *testing.T) {
	for _, c := range []struct {
		zone   string
		period Period
		at     string // an instant, in the zone's local time
		want   [4]string
	}{
		// Berlin: summer time starts on 2026-03-29 (a day of 23h) and ends
		// on 2026-10-25 (25h).
		{"Europe/Berlin", Day, "2026-03-29T12:00:00", [4]string{"2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"}},
		{"Europe/Berlin", Day, "2026-10-25T23:59:59", [4]string{"2026-10-24T00:00:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", "2026-10-27T00:00:00+01:00"}},
		{"Europe/Berlin", Week, "2026-03-29T00:00:00", [4]string{"2026-03-16T00:00:00+01:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-04-06T00:00:00+02:00"}},
		{"Europe/Berlin", Week, "2026-03-30T00:00:00", [4]string{"2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-04-06T00:00:00+02:00", "2026-04-13T00:00:00+02:00"}},
		{"Europe/Berlin", Month, "2028-02-29T23:59:59", [4]string{"2028-01-01T00:00:00+01:00", "2028-02-01T00:00:00+01:00", "2028-03-01T00:00:00+01:00", "2028-04-01T00:00:00+02:00"}},
		{"Europe/Berlin", Year, "2026-12-31T23:59:59", [4]string{"2025-01-01T00:00:00+01:00", "2026-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00"}},
		{"Asia/Kathmandu", Day, "2026-07-15T00:00:00", [4]string{"2026-07-14T00:00:00+05:45", "2026-07-15T00:00:00+05:45", "2026-07-16T00:00:00+05:45", "2026-07-17T00:00:00+05:45"}},
		{"Asia/Kathmandu", Month, "2026-04-30T23:59:59", [4]string{"2026-03-01T00:00:00+05:45", "2026-04-01T00:00:00+05:45", "2026-05-01T00:00:00+05:45", "2026-06-01T00:00:00+05:45"}},
		// Chatham: +12:45, +13:45 in summer (ends 2026-04-05 03:45, starts 2026-09-27 02:45).
		{"Pacific/Chatham", Week, "2026-04-05T12:00:00", [4]string{"2026-03-23T00:00:00+13:45", "2026-03-30T00:00:00+13:45", "2026-04-06T00:00:00+12:45", "2026-04-13T00:00:00+12:45"}},
		// Santiago: summer time starts at local midnight (2026-09-06 00:00
		// -04 is 01:00 -03): that day starts at 01:00, and the day before
		// has its 24 hours.
		{"America/Santiago", Day, "2026-09-05T23:30:00", [4]string{"2026-09-04T00:00:00-04:00", "2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"}},
		{"America/Santiago", Day, "2026-09-06T01:00:00", [4]string{"2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00", "2026-09-08T00:00:00-03:00"}},
		{"America/Santiago", Month, "2026-08-31T23:30:00", [4]string{"2026-07-01T00:00:00-04:00", "2026-08-01T00:00:00-04:00", "2026-09-01T00:00:00-04:00", "2026-10-01T00:00:00-03:00"}},
		// Samoa skipped 2011-12-30: Thursday the 29th at -10, then
		// Saturday the 31st at +14; no window is empty.
		{"Pacific/Apia", Day, "2011-12-31T12:00:00", [4]string{"2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00", "2012-01-02T00:00:00+14:00"}},
		{"Pacific/Apia", Day, "2011-12-29T12:00:00", [4]string{"2011-12-28T00:00:00-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00"}},
		{"UTC", Year, "2026-06-01T00:00:00", [4]string{"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
	} {
		zone, err := LoadZone(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05", c.at, zone)
		if err != nil {
			t.Fatal(err)
		}
		got := CalendarWindows(c.period, zone, at.UnixMicro())
		for i, w := range c.want {
			want, err := time.Parse(time.RFC3339, w)
			if err != nil {
				t.Fatal(err)
			}
			if got[i] != want.UnixMicro() {
				t.Errorf("%s %s at %s: window %d starts %s, want %s", c.zone, c.period, c.at, i, time.UnixMicro(got[i]).In(zone).Format(time.RFC3339), w)
			}
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"", "UTC", "Europe/Berlin", "Asia/Kathmandu", "Pacific/Chatham"} {
		a, err := LoadZone(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if b, _ := LoadZone(name); a != b {
			t.Errorf("%q loaded twice: two locations", name)
		}
	}
	// What a host may have beside the IANA names (its own zone, its copies
	// of the database under posix/ and right/, paths) is refused: the
	// rules are the embedded data's on every host.
	for _, name := range []string{"Mars/Olympus", "Local", "localtime", "posix/Europe/Berlin", "right/UTC", "posixrules",
		"../etc/passwd", "/etc/localtime", "/usr/share/zoneinfo/Europe/Berlin", "Europe/../Europe/Berlin", "Europe/berlin",
		"Europe/Berlin/", "zone.tab", "tzdata.zi", " UTC", "UTC\x00"} {
		if _, err := LoadZone(name); err == nil {
			t.Errorf("%q loaded", name)
		} else if !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("%q: the error does not name it: %v", name, err)
		}
	}
	for _, name := range []string{"Local", "localtime"} {
		if _, err := LoadZone(name); err == nil || !strings.Contains(err.Error(), "host") {
			t.Errorf("%q: %v, want an error saying it is the host's zone", name, err)
		}
	}
}

// TestCalendarWindowsEveryZone: in every zone of the embedded data, over
// years with and without daylight saving time, each window of each
// period starts at the first instant of its local day, Monday, 1st or 1
// January (where local midnight does not exist, the end of the gap that
// skips it; where it comes twice, the first), and the four windows are
// consecutive, non-empty and hold the instant they were asked about.
func TestCalendarWindowsEveryZone(t *testing.T) {
	names := ZoneNames()
	if len(names) < 400 {
		t.Fatalf("%d zones in the embedded data", len(names))
	}
	from := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range names {
		zone, err := LoadZone(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		for _, period := range Periods {
			// Step by a prime number of minutes, so instants fall at every
			// time of day; plus the instants on both sides of each of the
			// zone's transitions.
			step := map[Period]time.Duration{Day: 9973 * time.Minute, Week: 20011 * time.Minute, Month: 86413 * time.Minute, Year: 86413 * time.Minute}[period]
			var instants []time.Time
			for at := from; at.Before(to); at = at.Add(step) {
				instants = append(instants, at)
			}
			for at := from; at.Before(to); {
				_, end := at.In(zone).ZoneBounds()
				if end.IsZero() || !end.Before(to) {
					break
				}
				if !end.After(at) { // ZoneBounds can stall on dates its rules extend to
					at = at.Add(time.Hour)
					continue
				}
				instants = append(instants, end.Add(-time.Microsecond), end, end.Add(time.Hour), end.Add(-24*time.Hour), end.Add(24*time.Hour))
				at = end
			}
			for _, at := range instants {
				w := CalendarWindows(period, zone, at.UnixMicro())
				if !(w[0] < w[1] && w[1] <= at.UnixMicro() && at.UnixMicro() < w[2] && w[2] < w[3]) {
					t.Fatalf("%s %s at %s: windows %v do not hold it, in order", name, period, at.In(zone), w)
				}
				for i, start := range w {
					if err := firstInstantOf(period, zone, start); err != nil {
						t.Fatalf("%s %s at %s: window %d: %v", name, period, at.In(zone).Format(time.RFC3339), i, err)
					}
				}
			}
		}
	}
}

// firstInstantOf says why start, in µs, is not the first instant of its
// period in zone: local time at start must be in a new period, and one
// microsecond before it in an earlier one.
func firstInstantOf(period Period, zone *time.Location, start int64) error {
	at := time.UnixMicro(start).In(zone)
	before := time.UnixMicro(start - 1).In(zone)
	key := func(t time.Time) int {
		y, m, d := t.Date()
		switch period {
		case Day:
			return y*10000 + int(m)*100 + d
		case Week:
			wy, w := t.ISOWeek()
			return wy*100 + w
		case Month:
			return y*100 + int(m)
		}
		return y
	}
	switch {
	case key(before) >= key(at):
		return fmt.Errorf("starts at %s, but the instant before (%s) is not in an earlier %s", at.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), period)
	case period == Week && at.Weekday() != time.Monday && at.Hour() == 0 && at.Minute() == 0 && at.Second() == 0:
		// A week that starts at midnight starts on Monday.
		return fmt.Errorf("starts on %s", at.Format(time.RFC3339))
	}
	return nil
}

func TestPeriodNames(t *testing.T) {
	for _, p := range Periods {
		if got, err := ParsePeriod(p.String()); err != nil || got != p {
			t.Errorf("ParsePeriod(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := ParsePeriod("Fortnight"); err == nil || Period(0).Valid() {
		t.Error("invalid periods")
	}
}
