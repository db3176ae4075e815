package ingressnginx

import (
	"fmt"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

// maxCount is the API's bound on a limit's rate and burst.
const maxCount = 1_000_000_000

// gcraLimit is nginx's limit_req of rate per period (period in seconds:
// 1 for r/s, 60 for r/m) with burst, as a gcra limit, and the line that
// explains it.
//
// nginx keeps a zone's rate in thousandths of a request per second,
// rounded down (ngx_http_limit_req_zone: rate * 1000 / scale), so 10r/m is
// 0.166 requests per second; the limit says exactly that: rate 166 per
// 1000s, unless the rate divides evenly.
func gcraLimit(name string, n, periodSeconds, burst int64) (ratelimitv1alpha1.Limit, string) {
	milli := n * 1000 / periodSeconds
	rate, period := n, fmt.Sprintf("%ds", periodSeconds)
	if periodSeconds == 60 {
		period = "1m"
	}
	exact := n*1000%periodSeconds == 0
	if !exact {
		rate, period = milli, "1000s"
	}
	unit := map[int64]string{1: "r/s", 60: "r/m"}[periodSeconds]
	line := fmt.Sprintf("%s: nginx limit_req rate=%d%s burst=%d nodelay admits %d requests at once, then one every %s; gcra rate %d per %s, burst %d",
		name, n, unit, burst, burst+1, spacing(milli), rate, period, burst+1)
	if !exact {
		line += fmt.Sprintf(" (nginx keeps %d%s as %d thousandths of a request per second)", n, unit, milli)
	}
	return ratelimitv1alpha1.Limit{
		Name: ratelimitv1alpha1.LimitName(name),
		GCRA: &ratelimitv1alpha1.GCRA{
			Rate:   ratelimitv1alpha1.Count(rate),
			Period: ratelimitv1alpha1.Duration(period),
			Burst:  ratelimitv1alpha1.Count(burst + 1),
		},
	}, line
}

// spacing is the time between two requests at milli thousandths of a
// request per second.
func spacing(milli int64) string {
	us := 1_000_000_000 / milli
	switch {
	case us%1_000_000 == 0:
		return fmt.Sprintf("%ds", us/1_000_000)
	case us%1000 == 0:
		return fmt.Sprintf("%dms", us/1000)
	}
	return fmt.Sprintf("%.3fs", float64(us)/1e6)
}

// limitReqs are the gcra limits of nginx's limit_req zones for limit-rps
// and limit-rpm, each explained in p and its annotation listed to remove.
// reqKept: a limit_req stays with ingress-nginx, and with it the
// multiplier and the whitelist that shape it (limit_conn takes only the
// whitelist).
func (ic *ingressConversion) limitReqs(p *Policy, rps, rpm intAnn, multiplier int) (limits []ratelimitv1alpha1.Limit, reqKept bool) {
	for _, v := range []struct {
		a      intAnn
		limit  string
		period int64
	}{{rps, "rps", 1}, {rpm, "rpm", 60}} {
		if v.a.n <= 0 {
			continue
		}
		if v.a.n > maxCount || multiplier > maxCount || int64(v.a.n)*int64(multiplier)+1 > maxCount {
			ic.report(v.a.a.pos, v.a.name, convert.Inexact, "not converted: %d with a burst multiplier of %d is beyond what a policy holds (rates and bursts up to %d)", v.a.n, multiplier, maxCount)
			reqKept = true
			continue
		}
		l, line := gcraLimit(v.limit, int64(v.a.n), v.period, int64(v.a.n)*int64(multiplier))
		limits = append(limits, l)
		p.Explain = append(p.Explain, line)
		p.Remove = append(p.Remove, ic.full(v.a.name))
	}
	return limits, reqKept
}
