package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// TestCalendarLimit: calendar compiles to the engine's Calendar in the
// named zone (UTC by default); the quota window is the period's nominal
// length, the summary names the period and zone.
func TestCalendarLimit(t *testing.T) {
	berlin, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spec    string
		want    ratelimit.Limit
		summary string
	}{
		{"{limit: 10000, period: Month, timeZone: Europe/Berlin}", ratelimit.CalendarLimit(10000, ratelimit.Month, berlin), "l=calendar(10000/Month,Europe/Berlin)"},
		{"{limit: 5, period: Day}", ratelimit.CalendarLimit(5, ratelimit.Day, time.UTC), "l=calendar(5/Day,UTC)"},
		{"{limit: 5, period: Week, timeZone: UTC}", ratelimit.CalendarLimit(5, ratelimit.Week, time.UTC), "l=calendar(5/Week,UTC)"},
	} {
		p := mustCompile(t, "limits: [{name: l, calendar: "+tt.spec+"}]\n")
		l := p.Limits[0]
		if l.Limit.Algorithm != tt.want.Algorithm || l.Limit.Capacity != tt.want.Capacity || l.Limit.Period != tt.want.Period ||
			l.Limit.Zone.String() != tt.want.Zone.String() || l.Window != tt.want.Interval {
			t.Errorf("%s: limit %v window %s, want %v", tt.spec, l.Limit, l.Window, tt.want)
		}
		if p.Summary != tt.summary {
			t.Errorf("%s: summary %q, want %q", tt.spec, p.Summary, tt.summary)
		}
	}
}

// TestCalendarErrorsNameTheField: a zone the schema's pattern lets through
// but the zone data does not hold, and (for files) a period outside the
// enum, are refused naming their field.
func TestCalendarErrorsNameTheField(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want []string
	}{
		{"{limit: 1, period: Month, timeZone: Europe/Atlantis}", []string{"spec.limits[0].calendar.timeZone", `"Europe/Atlantis"`, "IANA"}},
		{"{limit: 1, period: Month, timeZone: Local}", []string{"spec.limits[0].calendar.timeZone", `"Local"`, "host"}},
		// What a Debian host has beside the IANA names: refused on every
		// host, as in the image, which has none of it.
		{"{limit: 1, period: Month, timeZone: localtime}", []string{"spec.limits[0].calendar.timeZone", `"localtime"`, "host"}},
		{"{limit: 1, period: Month, timeZone: posix/Europe/Berlin}", []string{"spec.limits[0].calendar.timeZone", `"posix/Europe/Berlin"`, `without "posix/"`}},
		{"{limit: 1, period: Month, timeZone: right/UTC}", []string{"spec.limits[0].calendar.timeZone", `"right/UTC"`, `without "right/"`}},
		{"{limit: 1, period: Month, timeZone: /etc/localtime}", []string{"spec.limits[0].calendar.timeZone", `"/etc/localtime"`, "IANA"}},
		{"{limit: 1, period: Fortnight}", []string{"spec.limits[0].calendar.period", `Unsupported value: "Fortnight"`, `"Month"`}},
		{"{limit: 1}", []string{"spec.limits[0].calendar.period"}},
		{"{limit: 0, period: Day}", []string{"spec.limits[0].calendar.limit"}},
	} {
		_, err := compileYAML("limits: [{name: l, calendar: " + tt.spec + "}]\n")
		if err == nil {
			t.Fatalf("%s: compiled", tt.spec)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.spec, err, w)
			}
		}
	}
}
