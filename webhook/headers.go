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
// and Retry-After on a denial (whole seconds, rounded up).
func setRateLimitHeaders(h http.Header, out *check.Outcome, now time.Time) {
	if !out.Allowed && out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(out.RetryAfter), 10))
	}
	if out.Tightest < 0 || out.Degraded {
		return
	}
	lr := &out.Limits[out.Tightest]
	style := lr.Policy.HeaderStyle
	id := strconv.Quote(lr.Policy.Name + "/" + lr.Limit.Name)
	reset := ceilSeconds(lr.Reset)
	if style == ratelimitv1alpha1.HeaderStyleIETF || style == ratelimitv1alpha1.HeaderStyleBoth {
		// Set directly: the draft's spelling, not Go's canonical "Ratelimit".
		h["RateLimit-Policy"] = []string{id + ";q=" + strconv.FormatInt(lr.Limit.Limit.Capacity, 10) + ";w=" + strconv.FormatInt(max(ceilSeconds(lr.Limit.Window), 1), 10)}
		h["RateLimit"] = []string{id + ";r=" + strconv.FormatInt(lr.Remaining, 10) + ";t=" + strconv.FormatInt(reset, 10)}
	}
	if style == ratelimitv1alpha1.HeaderStyleLegacy || style == ratelimitv1alpha1.HeaderStyleBoth {
		h["X-RateLimit-Limit"] = []string{strconv.FormatInt(lr.Limit.Limit.Capacity, 10)}
		h["X-RateLimit-Remaining"] = []string{strconv.FormatInt(lr.Remaining, 10)}
		resetAt := now.Add(lr.Reset)
		unix := resetAt.Unix()
		if resetAt.Nanosecond() > 0 {
			unix++ // round up: never announce a reset before it happens
		}
		h["X-RateLimit-Reset"] = []string{strconv.FormatInt(unix, 10)}
	}
}
