package checkhttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Problem types of the answers Sluice gives.
const (
	ProblemRateLimited = "https://sluice.dev/problems/rate-limited"
	ProblemMissingKey  = "https://sluice.dev/problems/missing-key"
	ProblemUnavailable = "https://sluice.dev/problems/limiter-unavailable"
	ProblemBadRequest  = "https://sluice.dev/problems/bad-request"
	ProblemCheckFailed = "https://sluice.dev/problems/check-failed"
	// ProblemTooManyLimits: the request meets more limits than one check
	// evaluates (ratelimit.MaxEntries); the detail names the bound.
	ProblemTooManyLimits = "https://sluice.dev/problems/too-many-limits"
	// ProblemNoRelease: the request met a concurrency limit through a
	// transport that cannot release it (check.ErrNoRelease); the detail
	// names the policy and the limit.
	ProblemNoRelease = "https://sluice.dev/problems/no-release"
	// ProblemAboutBlank says no more than the status and title (RFC 9457
	// section 4.2.1): the dashboard's answers, and a body that is not JSON.
	ProblemAboutBlank = "about:blank"
)

// ProblemContentType is the media type of a problem body (RFC 9457).
const ProblemContentType = "application/problem+json"

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

// WriteProblem answers with p as application/problem+json, status p.Status.
func WriteProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(AppendProblem(nil, &p))
}

// AppendProblem appends the body WriteProblem writes for p to buf.
func AppendProblem(buf []byte, p *Problem) []byte {
	return appendProblem(buf, p, p.Detail, p.RetryAfter)
}

// CheckFailedProblem is the answer to a check the checker returned err
// for: 404 for a policy that does not exist, 400 for a request that meets
// more limits than one check evaluates, else 500: a concurrency limit
// met where no release can follow (a policy that this transport must not
// check), or a bug (Redis being away is answered by the failure mode,
// never an error).
func CheckFailedProblem(err error) Problem {
	p := Problem{Type: ProblemCheckFailed, Title: "Check failed", Status: http.StatusInternalServerError, Detail: err.Error()}
	switch {
	case errors.Is(err, check.ErrUnknownPolicy):
		p.Status, p.Title = http.StatusNotFound, "No such policy"
	case errors.Is(err, check.ErrTooManyLimits):
		p.Type, p.Status, p.Title = ProblemTooManyLimits, http.StatusBadRequest, "Too many limits for one check"
	case errors.Is(err, check.ErrNoRelease):
		p.Type, p.Title = ProblemNoRelease, "Limit without a release"
	}
	return p
}

// problemContentType is shared by every denial (capacity 1: see
// AppendHeaders).
var problemContentType = []string{ProblemContentType}

// DenialProblem describes the denial out, answered with status.
func DenialProblem(out *check.Outcome, status int) Problem {
	policy := deciderName(out)
	p, detail, retry := describeDenial(out, status, policy, nil)
	p.Policy, p.Detail = policy, string(detail)
	if retry >= 0 {
		p.RetryAfter = &retry
	}
	return p
}

// WriteDenial answers the denial out with status and its problem body.
// The rate-limit headers are SetHeaders' to write, before.
func WriteDenial(w http.ResponseWriter, out *check.Outcome, status int) {
	AppendDenial(w, out, status, nil)
}

// AppendDenial is WriteDenial for the hot path: the body is rendered into
// buf (returned for reuse) by DenialBody.
func AppendDenial(w http.ResponseWriter, out *check.Outcome, status int, buf []byte) []byte {
	body, buf := DenialBody(out, status, buf)
	w.Header()["Content-Type"] = problemContentType
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return buf
}

// DenialBody renders the problem body of the denial out, answered with
// status, into buf (returned, grown, for reuse; body is a part of it), by
// the same code as DenialProblem and WriteProblem, without building the
// detail string or anything that outlives the call.
func DenialBody(out *check.Outcome, status int, buf []byte) (body, reuse []byte) {
	policy := deciderName(out)
	p, buf, retry := describeDenial(out, status, policy, buf[:0])
	p.Policy = policy
	var retryAfter *int64
	if retry >= 0 {
		retryAfter = &retry
	}
	detail := len(buf)
	buf = appendProblem(buf, &p, buf[:detail], retryAfter)
	return buf[detail:], buf
}

// deciderName names the denying policy ("" for none).
func deciderName(out *check.Outcome) string { return policyName(out.Decider) }

// policyName is p.String(), "" for nil. It names package policy so that
// String inlines here: the name of a denial then does not escape, and is
// built without an allocation.
func policyName(p *policy.Policy) string {
	if p == nil {
		return ""
	}
	return p.String()
}

// describeDenial is the one description of a denial by policy (named by
// deciderName): the problem's type, title, status and limit, the detail's
// text appended to buf, and the retryAfter seconds (-1: none). Policy,
// Detail and RetryAfter are the caller's to set, so that a hot caller's
// values stay on its stack.
func describeDenial(out *check.Outcome, status int, policy string, buf []byte) (Problem, []byte, int64) {
	p := Problem{Status: status}
	var retry int64 = -1
	if out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		retry = CeilSeconds(out.RetryAfter)
	}
	switch out.Reason {
	case check.ReasonMissingKey:
		p.Type, p.Title = ProblemMissingKey, "Request lacks the rate-limit key"
		buf = append(buf, "policy "...)
		buf = append(buf, policy...)
		buf = append(buf, " keys requests by "...)
		buf = strconv.AppendQuote(buf, out.Decider.KeyTemplate())
		return p, append(buf, " and denies requests without it"...), retry
	case check.ReasonStoreUnavailable:
		p.Type, p.Title = ProblemUnavailable, "Rate limiter unavailable"
		buf = append(buf, "policy "...)
		buf = append(buf, policy...)
		return p, append(buf, " fails closed and its limits cannot be checked right now"...), retry
	}
	p.Type, p.Title = ProblemRateLimited, "Rate limit exceeded"
	if out.Reason == check.ReasonBanned {
		// The bucket's ban, not one of its limits, denies: no limit named.
		buf = append(buf, "policy "...)
		buf = append(buf, policy...)
		buf = append(buf, " has banned this key after repeated denials (its penalty box); retry in "...)
		buf = strconv.AppendInt(buf, max(retry, 0), 10)
		return p, append(buf, 's'), retry
	}
	if lr := out.Reporting(); lr != nil && lr.Limit.Hidden {
		buf = append(buf, "a limit"...) // hidden from the client (visibility Hidden)
	} else {
		p.Limit = out.NamedLimit()
		buf = append(buf, "limit "...)
		buf = strconv.AppendQuote(buf, p.Limit)
	}
	buf = append(buf, " of policy "...)
	buf = append(buf, policy...)
	if retry < 0 {
		return p, append(buf, " can never admit this request"...), retry
	}
	buf = append(buf, " is exhausted; retry in "...)
	buf = strconv.AppendInt(buf, retry, 10)
	return p, append(buf, 's'), retry
}

// appendProblem appends p, with detail and retryAfter in place of p.Detail
// and p.RetryAfter, as encoding/json encodes a Problem (a json.Encoder, so
// with a newline).
func appendProblem[T string | []byte](buf []byte, p *Problem, detail T, retryAfter *int64) []byte {
	buf = append(buf, `{"type":`...)
	buf = appendJSONString(buf, p.Type)
	buf = append(buf, `,"title":`...)
	buf = appendJSONString(buf, p.Title)
	buf = append(buf, `,"status":`...)
	buf = strconv.AppendInt(buf, int64(p.Status), 10)
	buf = append(buf, `,"detail":`...)
	buf = appendJSONString(buf, detail)
	if p.Policy != "" {
		buf = append(buf, `,"policy":`...)
		buf = appendJSONString(buf, p.Policy)
	}
	if p.Limit != "" {
		buf = append(buf, `,"limit":`...)
		buf = appendJSONString(buf, p.Limit)
	}
	if retryAfter != nil {
		buf = append(buf, `,"retryAfter":`...)
		buf = strconv.AppendInt(buf, *retryAfter, 10)
	}
	return append(buf, "}\n"...)
}

// appendJSONString appends s as a JSON string. Printable ASCII, quotes
// and backslashes included (the common case), is escaped here as
// encoding/json escapes it; any other text is encoding/json's to escape,
// so the bytes are always its own.
func appendJSONString[T string | []byte](buf []byte, s T) []byte {
	start := len(buf)
	buf = append(buf, '"')
	from := 0 // s[from:] is not yet in buf
	for i := 0; i < len(s); i++ {
		switch jsonEscape[s[i]] {
		case escBackslash:
			buf = append(buf, s[from:i]...)
			buf = append(buf, '\\')
			from = i
		case escEncoder:
			return appendMarshaled(buf[:start], string(s))
		}
	}
	buf = append(buf, s[from:]...)
	return append(buf, '"')
}

// How encoding/json writes a byte inside a string.
const (
	escNone      = iota // as it is
	escBackslash        // after a backslash: '"' and '\\'
	escEncoder          // otherwise: control bytes, HTML's <>&, and non-ASCII (UTF-8 checks)
)

var jsonEscape = func() (t [256]uint8) {
	for c := range t {
		if c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			t[c] = escEncoder
		}
	}
	t['"'], t['\\'] = escBackslash, escBackslash
	return t
}()

// appendMarshaled appends s as encoding/json writes it. It marshals a
// copy: s itself, given to json.Marshal, would escape, and with it the
// denial path's policy name, costing that path an allocation.
func appendMarshaled(buf []byte, s string) []byte {
	quoted, err := json.Marshal(strings.Clone(s))
	if err != nil { // cannot happen for a string
		quoted = []byte(`""`)
	}
	return append(buf, quoted...)
}
