package policy

import (
	"strings"
	"testing"
)

// A when expression names its time zones as calendar quotas do: a literal
// IANA name of the compiled-in database, or an offset. A host's own names
// (localtime, posix/..., right/...) and a zone taken from the request are
// refused when the policy compiles, naming the function and the field.
func TestWhenZonesAreIANANames(t *testing.T) {
	const stamp = `timestamp(request.headers["x-date"])`
	accepted := []string{
		stamp + `.getHours("Europe/Berlin") < 6`,
		stamp + `.getDayOfWeek("America/Santiago") == 0`,
		stamp + `.getHours("UTC") == 1`,
		stamp + `.getHours("+05:30") == 1`,
		stamp + `.getHours() == 1`,
		`duration(request.headers["x-age"]).getHours() > 1`,
	}
	for _, expr := range accepted {
		if _, err := compileWhen(expr); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
	rejected := []struct{ expr, want string }{
		{stamp + `.getHours("localtime") < 6`, `getHours (line 1, column 46): time zone "localtime"`},
		{stamp + `.getHours("Local") < 6`, `time zone "Local"`},
		{stamp + `.getMinutes("posix/Europe/Berlin") < 6`, `getMinutes (line 1, column 48): time zone "posix/Europe/Berlin"`},
		{stamp + `.getFullYear("right/UTC") > 2000`, `time zone "right/UTC"`},
		{stamp + `.getDate("/etc/localtime") > 1`, `time zone "/etc/localtime"`},
		{stamp + `.getHours("Mars/Olympus") < 6`, `time zone "Mars/Olympus": must be a time zone of the IANA database`},
		{stamp + `.getHours(request.headers["x-tz"]) < 6`, "the time zone of getHours must be a string literal (line 1, column 46)"},
		{stamp + `.getDayOfWeek("Europe/" + "Berlin") == 1`, "the time zone of getDayOfWeek must be a string literal"},
	}
	for _, tt := range rejected {
		_, err := compileYAML("match: {when: '" + strings.ReplaceAll(tt.expr, "'", "''") + "'}\n" + oneLimit)
		if err == nil {
			t.Errorf("%s: compiled", tt.expr)
			continue
		}
		for _, want := range []string{"spec.match.when", tt.want} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not contain %q", tt.expr, err, want)
			}
		}
	}
}
