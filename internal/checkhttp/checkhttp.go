// Package checkhttp renders a check.Outcome as HTTP, the same way wherever
// a decision is answered: the rate-limit headers of the tightest limit,
// Retry-After, and every application/problem+json body Sluice sends (a
// denial's, a bad request's, the dashboard's), all by one renderer. It also
// normalizes the host and path of a request before policies are matched.
//
// The check endpoint (webhook) and the public middleware package both use
// it, so a decision reads the same wherever it is answered.
package checkhttp

import (
	"math"
	"net/http"
	"strconv"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// HeaderNames are the headers SetHeaders may write, spelled as sent
// (RateLimit and RateLimit-Policy in the draft's spelling, which is not
// Go's canonical "Ratelimit").
var HeaderNames = []string{
	"RateLimit-Policy", "RateLimit",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"Retry-After",
}

// CeilSeconds rounds a duration up to whole seconds, so a client that
// waits that long is never early.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// SetHeaders writes the headers of the tightest limit in the decider's
// style:
//
//	RateLimit-Policy: "<policy>/<limit>";q=<quota>;w=<window s>
//	RateLimit: "<policy>/<limit>";r=<remaining>;t=<reset s>
//	X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (Unix time)
//
// and Retry-After on a denial (whole seconds, rounded up).
func SetHeaders(h http.Header, out *check.Outcome, now time.Time) {
	AppendHeaders(h, out, now, new(HeaderScratch))
}

// HeaderScratch is AppendHeaders' reusable memory: the buffer values are
// rendered in, and the slices the header map is given. A server reads a
// response's header map when it writes the response, so the next answer
// may reuse them.
type HeaderScratch struct {
	buf  []byte
	vals [4]string
}

// AppendHeaders is SetHeaders for the hot path: the values that change per
// answer are rendered into sc's buffer and become one string (the one
// allocation); the rest were rendered when the policy was compiled. Header
// names are set as written in the drafts, not in Go's canonical
// "Ratelimit".
func AppendHeaders(h http.Header, out *check.Outcome, now time.Time, sc *HeaderScratch) {
	buf := sc.buf[:0]
	var ends [4]int // ends of RateLimit, Remaining, Reset, Retry-After in buf
	var have [4]bool
	if !out.Allowed && out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		buf = strconv.AppendInt(buf, CeilSeconds(out.RetryAfter), 10)
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
	ends[0] = start
	if ietf {
		buf = append(buf, lr.Limit.QuotaID...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, lr.Remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, CeilSeconds(lr.Reset), 10)
		ends[0], have[0] = len(buf), true
	}
	if legacy {
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
	sc.buf = buf
	if len(buf) == 0 {
		return
	}
	all := string(buf) // the one allocation for every per-answer value
	vals := sc.vals[:]
	set := func(i int, name string, from, to int) {
		vals[i] = all[from:to]
		h[name] = vals[i : i+1 : i+1] // capacity 1: an append elsewhere cannot overwrite a neighbour
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
}

// DenyStatus is the deciding policy's deny status, else fallback.
func DenyStatus(out *check.Outcome, fallback int) int {
	if out.Decider != nil && out.Decider.DenyStatus != 0 {
		return out.Decider.DenyStatus
	}
	return fallback
}
