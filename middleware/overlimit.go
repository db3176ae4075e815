package middleware

import (
	"context"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// OverLimitHeader is the request header the next handler reads to learn
// that the request is over soft limits (a limit with mode Soft): the
// check endpoint's header of the same name, whose value names each
//
//	<namespace>/<policy>;limit=<name>;mode=Soft
//
// joined by ", ". The Limiter removes one the client sent, so the next
// handler can trust it; OverLimits reads it from the request's context.
const OverLimitHeader = checkhttp.OverLimitHeader

// SoftLimit is a soft limit a request went over.
type SoftLimit struct {
	// Policy is the limit's policy, "namespace/name".
	Policy string
	// Limit is the limit's name.
	Limit string
}

type overLimitKey struct{}

// OverLimits returns the soft limits the request whose context ctx is
// went over (nil when none): the next handler's cue to degrade gracefully.
func OverLimits(ctx context.Context) []SoftLimit {
	v, _ := ctx.Value(overLimitKey{}).(string)
	return ParseOverLimit(v)
}

// ParseOverLimit parses OverLimitHeader's value; an element it cannot
// read is left out.
func ParseOverLimit(v string) []SoftLimit {
	var out []SoftLimit
	for elem := range strings.SplitSeq(v, ",") {
		params := strings.Split(strings.TrimSpace(elem), ";")
		sl := SoftLimit{Policy: params[0]}
		for _, p := range params[1:] {
			if name, ok := strings.CutPrefix(p, "limit="); ok {
				sl.Limit = name
			}
		}
		if strings.Contains(sl.Policy, "/") && sl.Limit != "" {
			out = append(out, sl)
		}
	}
	return out
}

// passOn is the request the next handler is given: without a client's
// OverLimitHeader, and with the check's (over: its value) in its header
// and context when the request is over soft limits.
func passOn(r *http.Request, over string) *http.Request {
	delete(r.Header, OverLimitHeader)
	if over == "" {
		return r
	}
	r.Header.Set(OverLimitHeader, over)
	return r.WithContext(context.WithValue(r.Context(), overLimitKey{}, over))
}
