package ratelimit

import (
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
	for _, name := range []string{"Mars/Olympus", "Local", "../etc/passwd", "Europe/berlin"} {
		if _, err := LoadZone(name); err == nil {
			t.Errorf("%q loaded", name)
		}
	}
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
