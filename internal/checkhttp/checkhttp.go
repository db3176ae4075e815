// Package checkhttp renders a check.Outcome as HTTP, the same way wherever
// a decision is answered: the rate-limit headers of the reporting limit,
// Retry-After, and every application/problem+json body Sluice sends (a
// denial's, a bad request's, the dashboard's), all by one renderer.
// Reading a request is package intake's.
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

// HeaderNames are the headers SetHeaders may write (in the order of the
// h* indexes, and of HeaderScratch.Value), spelled as sent
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

// SetHeaders writes the headers of the limit the client is shown
// (check.Outcome.Shown: the reporting limit unless it is hidden) in its
// policy's style:
//
//	RateLimit-Policy: "<policy>/<limit>";q=<quota>;w=<window s>
//	RateLimit: "<policy>/<limit>";r=<remaining>;t=<reset s>
//	X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (Unix time)
//
// and Retry-After on a denial (whole seconds, rounded up). A soft limit
// the request went on over shows 0 remaining while the request succeeds:
// the client's warning.
func SetHeaders(h http.Header, out *check.Outcome, now time.Time) {
	AppendHeaders(h, out, now, new(HeaderScratch))
}

// HeaderScratch is the reusable memory of AppendHeaders and Render: the
// buffer values are rendered in, and the slices the header map is given.
// A server reads a response's header map when it writes the response, so
// the next answer may reuse them.
type HeaderScratch struct {
	buf      []byte
	from, to [numHeaders]int // each value's place in buf; from == to: not sent
	vals     [numHeaders]string
}

// Indexes of HeaderNames.
const (
	hPolicy = iota
	hRateLimit
	hLimit
	hRemaining
	hReset
	hRetryAfter
	numHeaders
)

// NumHeaders is the number of HeaderNames.
const NumHeaders = numHeaders

// AppendHeaders is SetHeaders for the hot path: every value is rendered
// into sc's buffer, which becomes one string (the one allocation) that the
// values are cut from. Header names are set as written in the drafts, not
// in Go's canonical "Ratelimit".
func AppendHeaders(h http.Header, out *check.Outcome, now time.Time, sc *HeaderScratch) {
	for i, v := range sc.RenderStrings(out, now) {
		if v != "" {
			h[HeaderNames[i]] = sc.vals[i : i+1 : i+1] // capacity 1: an append elsewhere cannot overwrite a neighbor
		}
	}
}

// RenderStrings renders the values as Render does and returns them in
// HeaderNames' order, "" for a header not sent (no value is empty), cut
// from one string: the one allocation. The strings stay valid after sc is
// used again; the slice does not.
func (sc *HeaderScratch) RenderStrings(out *check.Outcome, now time.Time) []string {
	sc.Render(out, now)
	sc.vals = [numHeaders]string{}
	if len(sc.buf) == 0 {
		return sc.vals[:]
	}
	all := string(sc.buf)
	for i := range numHeaders {
		if sc.from[i] != sc.to[i] {
			sc.vals[i] = all[sc.from[i]:sc.to[i]]
		}
	}
	return sc.vals[:]
}

// Render renders the values of the headers AppendHeaders sets, and
// nothing more: Value(i) is then the value of HeaderNames[i]. It is
// AppendHeaders for a server that copies header values into its own
// response (the check routes on fasthttp), and allocates nothing once sc's
// buffer has grown.
func (sc *HeaderScratch) Render(out *check.Outcome, now time.Time) {
	buf := sc.buf[:0]
	sc.from, sc.to = [numHeaders]int{}, [numHeaders]int{}
	var style ratelimitv1alpha1.HeaderStyle
	lr := out.Shown()
	var remaining int64
	if lr != nil {
		style, remaining = lr.Policy.HeaderStyle, out.ShownRemaining(lr)
	}
	if style == ratelimitv1alpha1.HeaderStyleIETF || style == ratelimitv1alpha1.HeaderStyleBoth {
		sc.from[hPolicy] = len(buf)
		buf = appendQuotaID(buf, lr)
		idEnd := len(buf)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, lr.Limit.Limit.Capacity, 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, max(CeilSeconds(lr.Limit.Window), 1), 10)
		sc.to[hPolicy], sc.from[hRateLimit] = len(buf), len(buf)
		buf = append(buf, buf[sc.from[hPolicy]:idEnd]...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, CeilSeconds(lr.Reset), 10)
		sc.to[hRateLimit] = len(buf)
	}
	if style == ratelimitv1alpha1.HeaderStyleLegacy || style == ratelimitv1alpha1.HeaderStyleBoth {
		sc.from[hLimit] = len(buf)
		buf = strconv.AppendInt(buf, lr.Limit.Limit.Capacity, 10)
		sc.to[hLimit], sc.from[hRemaining] = len(buf), len(buf)
		buf = strconv.AppendInt(buf, remaining, 10)
		sc.to[hRemaining], sc.from[hReset] = len(buf), len(buf)
		resetAt := now.Add(lr.Reset)
		unix := resetAt.Unix()
		if resetAt.Nanosecond() > 0 {
			unix++ // round up: never announce a reset before it happens
		}
		buf = strconv.AppendInt(buf, unix, 10)
		sc.to[hReset] = len(buf)
	}
	if !out.Allowed && out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		sc.from[hRetryAfter] = len(buf)
		buf = strconv.AppendInt(buf, CeilSeconds(out.RetryAfter), 10)
		sc.to[hRetryAfter] = len(buf)
	}
	sc.buf = buf
}

// Value is the value of HeaderNames[i] that Render rendered, nil when that
// header is not sent. It is valid until sc is used again.
func (sc *HeaderScratch) Value(i int) []byte {
	if sc.from[i] == sc.to[i] {
		return nil
	}
	return sc.buf[sc.from[i]:sc.to[i]:sc.to[i]]
}

// appendQuotaID appends the IETF headers' name of lr's limit,
// "<policy>/<limit>" quoted as strconv.Quote quotes it, without building
// the unquoted text.
func appendQuotaID(buf []byte, lr *check.LimitResult) []byte {
	if quotesAsIs(lr.Policy.Name) && quotesAsIs(lr.Limit.Name) { // the names of the API's rules
		buf = append(buf, '"')
		buf = append(buf, lr.Policy.Name...)
		buf = append(buf, '/')
		buf = append(buf, lr.Limit.Name...)
		return append(buf, '"')
	}
	// The two names quoted apart and joined: the same, since '/' ends any
	// UTF-8 sequence before it.
	buf = strconv.AppendQuote(buf, lr.Policy.Name)
	buf[len(buf)-1] = '/' // the policy name's closing quote
	at := len(buf)
	buf = strconv.AppendQuote(buf, lr.Limit.Name)
	return append(buf[:at], buf[at+1:]...) // drop the limit name's opening quote
}

// quotesAsIs reports whether strconv.Quote leaves s's bytes as they are.
func quotesAsIs(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// DenyStatus is the deciding policy's deny status, else fallback.
func DenyStatus(out *check.Outcome, fallback int) int {
	if out.Decider != nil && out.Decider.DenyStatus != 0 {
		return out.Decider.DenyStatus
	}
	return fallback
}
