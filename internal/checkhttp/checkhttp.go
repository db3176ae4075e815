// Package checkhttp renders a check.Outcome as HTTP, the same way wherever
// a decision is answered: the rate-limit headers of the tightest limit,
// Retry-After, and the application/problem+json body of a denial. It also
// normalizes the host and path of a request before policies are matched.
//
// The check endpoint (webhook) and the public middleware package both use
// it, so a decision reads the same wherever it is answered.
package checkhttp

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Problem types of the answers Sluice gives.
const (
	ProblemRateLimited = "https://sluice.dev/problems/rate-limited"
	ProblemMissingKey  = "https://sluice.dev/problems/missing-key"
	ProblemUnavailable = "https://sluice.dev/problems/limiter-unavailable"
	ProblemBadRequest  = "https://sluice.dev/problems/bad-request"
	ProblemCheckFailed = "https://sluice.dev/problems/check-failed"
)

// ProblemContentType is the media type of a problem body (RFC 9457).
const ProblemContentType = "application/problem+json"

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

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Policy     string `json:"policy,omitempty"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter *int64 `json:"retryAfter,omitempty"`
}

// DenialProblem describes the denial out, answered with status.
func DenialProblem(out *check.Outcome, status int) Problem {
	p := Problem{Status: status}
	if out.Decider != nil {
		p.Policy = out.Decider.String()
	}
	if out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		secs := CeilSeconds(out.RetryAfter)
		p.RetryAfter = &secs
	}
	switch out.Reason {
	case check.ReasonMissingKey:
		p.Type, p.Title = ProblemMissingKey, "Request lacks the rate-limit key"
		p.Detail = fmt.Sprintf("policy %s keys requests by %q and denies requests without it", p.Policy, out.Decider.KeyTemplate())
	case check.ReasonStoreUnavailable:
		p.Type, p.Title = ProblemUnavailable, "Rate limiter unavailable"
		p.Detail = fmt.Sprintf("policy %s fails closed and its limits cannot be checked right now", p.Policy)
	default:
		p.Type, p.Title = ProblemRateLimited, "Rate limit exceeded"
		if out.Tightest >= 0 {
			p.Limit = out.Limits[out.Tightest].Limit.Name
		}
		if p.RetryAfter != nil {
			p.Detail = fmt.Sprintf("limit %q of policy %s is exhausted; retry in %ds", p.Limit, p.Policy, *p.RetryAfter)
		} else {
			p.Detail = fmt.Sprintf("limit %q of policy %s can never admit this request", p.Limit, p.Policy)
		}
	}
	return p
}

// WriteProblem answers with p as application/problem+json, status p.Status.
func WriteProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// WriteDenial answers the denial out with status and its problem body.
// The rate-limit headers are SetHeaders' to write, before.
func WriteDenial(w http.ResponseWriter, out *check.Outcome, status int) {
	AppendDenial(w, out, status, nil)
}

// problemContentType is shared by every denial (capacity 1: see AppendHeaders).
var problemContentType = []string{ProblemContentType}

// AppendDenial is WriteDenial for the hot path: the body of a rate-limited
// denial is written by hand into buf (returned for reuse), since the JSON
// encoder's reflection costs more than the check. It writes the same JSON
// as DenialProblem encoded.
func AppendDenial(w http.ResponseWriter, out *check.Outcome, status int, buf []byte) []byte {
	if out.Reason != check.ReasonLimited {
		WriteProblem(w, DenialProblem(out, status)) // rare: no need to be fast
		return buf
	}
	var policy, limit string
	if out.Decider != nil {
		policy = out.Decider.String()
	}
	if out.Tightest >= 0 {
		limit = out.Limits[out.Tightest].Limit.Name
	}
	var retry int64 = -1
	if out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		retry = CeilSeconds(out.RetryAfter)
	}
	buf = append(buf[:0], `{"type":"`+ProblemRateLimited+`","title":"Rate limit exceeded","status":`...)
	buf = strconv.AppendInt(buf, int64(status), 10)
	buf = append(buf, `,"detail":"limit \"`...)
	buf = appendJSONText(buf, limit)
	buf = append(buf, `\" of policy `...)
	buf = appendJSONText(buf, policy)
	if retry >= 0 {
		buf = append(buf, " is exhausted; retry in "...)
		buf = strconv.AppendInt(buf, retry, 10)
		buf = append(buf, 's', '"')
	} else {
		buf = append(buf, ` can never admit this request"`...)
	}
	if policy != "" {
		buf = append(buf, `,"policy":"`...)
		buf = appendJSONText(buf, policy)
		buf = append(buf, '"')
	}
	if limit != "" {
		buf = append(buf, `,"limit":"`...)
		buf = appendJSONText(buf, limit)
		buf = append(buf, '"')
	}
	if retry >= 0 {
		buf = append(buf, `,"retryAfter":`...)
		buf = strconv.AppendInt(buf, retry, 10)
	}
	buf = append(buf, "}\n"...)
	w.Header()["Content-Type"] = problemContentType
	w.WriteHeader(status)
	_, _ = w.Write(buf)
	return buf
}

// appendJSONText appends s escaped as encoding/json escapes the inside of
// a string (policy and limit names are DNS labels; this is a safety net).
func appendJSONText(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			buf = append(buf, `\u00`...)
			buf = append(buf, hex[c>>4], hex[c&15])
		default:
			buf = append(buf, c)
		}
	}
	return buf
}
