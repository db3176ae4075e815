package policy

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// compileCalendar: the zone is looked up here, in the zone data compiled
// into the binary (ratelimit.LoadZone), never the host's, so a name the
// schema let through but no zone bears stalls the policy with the field
// named on every host alike, and the last good version keeps serving. The period is checked here too, for files
// that did not pass through an API server.
func compileCalendar(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	c := l.Calendar
	if c == nil {
		return ratelimit.Limit{}, "", false
	}
	capacity := n.count(p.Child("limit"), c.Limit)
	period, err := ratelimit.ParsePeriod(string(c.Period))
	if err != nil {
		n.errs = append(n.errs, field.NotSupported(p.Child("period"), string(c.Period), []ratelimitv1alpha1.CalendarPeriod{
			ratelimitv1alpha1.CalendarPeriodDay, ratelimitv1alpha1.CalendarPeriodWeek, ratelimitv1alpha1.CalendarPeriodMonth, ratelimitv1alpha1.CalendarPeriodYear}))
	}
	zone, err := ratelimit.LoadZone(string(c.TimeZone))
	if err != nil {
		reason := err.Error()
		if ze := (*ratelimit.ZoneError)(nil); errors.As(err, &ze) {
			reason = ze.Reason
		}
		n.errs = append(n.errs, field.Invalid(p.Child("timeZone"), c.TimeZone, reason))
	}
	return ratelimit.CalendarLimit(capacity, period, zone), fmt.Sprintf("%s(%d/%s,%s)", ratelimitv1alpha1.AlgorithmCalendar, c.Limit, c.Period, zone), true
}
