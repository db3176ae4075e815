package webhook

import (
	"math"
	"net/http"
	"strconv"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// ceilSeconds rounds a duration up to whole seconds, so a client that
// waits that long is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// setRateLimitHeaders writes the headers of the tightest limit in the
// decider's style:
//
//	RateLimit-Policy: "<policy>/<limit>";q=<quota>;w=<window s>
//	RateLimit: "<policy>/<limit>";r=<remaining>;t=<reset s>
//	X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (Unix time)
//
// and Retry-After on a denial (whole seconds, rounded up). The values that
// change per answer are rendered into buf and become one string; the rest
// were rendered when the policy was compiled. Header names are set as
// written in the drafts (not Go's canonical "Ratelimit").
func setRateLimitHeaders(h http.Header, out *check.Outcome, now time.Time, buf []byte) []byte {
	buf = buf[:0]
	var ends [4]int // ends of RateLimit, Remaining, Reset, Retry-After in buf
	var have [4]bool
	if !out.Allowed && out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		buf = strconv.AppendInt(buf, ceilSeconds(out.RetryAfter), 10)
		ends[3], have[3] = len(buf), true
	}
	var style ratelimitv1alpha1.HeaderStyle
	var lr *check.LimitResult
	if out.Tightest >= 0 && !out.Degraded {
		lr = &out.Limits[out.Tightest]
		style = lr.Policy.HeaderStyle
	}
	ietf := style == ratelimitv1alpha1.HeaderStyleIETF || style == ratelimitv1alpha1.HeaderStyleBoth
	legacy := style == ratelimitv1alpha1.HeaderStyleLegacy || style == ratelimitv1alpha1.HeaderStyleBoth
	start := len(buf)
	if ietf {
		buf = append(buf, lr.Limit.QuotaID...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, lr.Remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, ceilSeconds(lr.Reset), 10)
		ends[0], have[0] = len(buf), true
	}
	if legacy {
		ends[0] = len(buf) // keeps the RateLimit slice bounds valid when absent
		buf = strconv.AppendInt(buf, lr.Remaining, 10)
		ends[1], have[1] = len(buf), true
		resetAt := now.Add(lr.Reset)
		unix := resetAt.Unix()
		if resetAt.Nanosecond() > 0 {
			unix++ // round up: never announce a reset before it happens
		}
		buf = strconv.AppendInt(buf, unix, 10)
		ends[2], have[2] = len(buf), true
	}
	if len(buf) == 0 {
		return buf
	}
	all := string(buf) // the one allocation for every per-answer value
	vals := make([]string, 4)
	set := func(i int, name string, from, to int) {
		vals[i] = all[from:to]
		h[name] = vals[i : i+1 : i+1]
	}
	if have[3] {
		set(3, "Retry-After", 0, ends[3])
	}
	if have[0] {
		set(0, "RateLimit", start, ends[0])
		h["RateLimit-Policy"] = lr.Limit.PolicyHeader
	}
	if have[1] {
		set(1, "X-RateLimit-Remaining", ends[0], ends[1])
		set(2, "X-RateLimit-Reset", ends[1], ends[2])
		h["X-RateLimit-Limit"] = lr.Limit.LimitHeader
	}
	return buf
}
