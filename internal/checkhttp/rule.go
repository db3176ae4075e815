package checkhttp

import (
	"encoding/hex"
	"hash/fnv"
	"strconv"

	"github.com/sluice-dev/sluice/internal/check"
)

// PolicyHeader is the response header of the HTTP check endpoint that
// names the rule that decided (with --report-policy), for the proxy's
// access log: nginx reads it with auth_request_set.
const PolicyHeader = "X-Sluice-Policy"

// Rule is which rule decided a check, as a proxy's access log prints it:
// the HTTP endpoint's PolicyHeader, the dynamic metadata of the ext_authz
// and rate limit service answers.
type Rule struct {
	// Decision is "allowed" or "denied".
	Decision string
	// Reason is the outcome's reason (RateLimited, StoreUnavailable, ...).
	Reason check.Reason
	// Policy is the deciding policy, namespace/name.
	Policy string
	// Limit, KeyHash and Remaining are the reporting limit's: its name,
	// a hash of its bucket's key (the key itself may hold a client's
	// address or header) and what it still admits. Limit is "" when no
	// limit reports (the failure mode or a missing key answered).
	Limit     string
	KeyHash   string
	Remaining int64
}

// RuleOf is the rule that decided out; false when no policy matched.
func RuleOf(out *check.Outcome) (Rule, bool) {
	p := out.Decider
	lr := out.Reporting()
	if lr != nil {
		p = lr.Policy
	}
	if p == nil {
		return Rule{}, false
	}
	r := Rule{Decision: "allowed", Reason: out.Reason, Policy: p.Namespace + "/" + p.Name}
	if !out.Allowed {
		r.Decision = "denied"
	}
	if lr != nil {
		r.Limit, r.KeyHash, r.Remaining = lr.Limit.Name, KeyHash(lr.Key), lr.Remaining
	}
	return r, true
}

// KeyHash is the 16 hex digits of the 64-bit FNV-1a hash of a bucket's
// key: the same key gives the same hash on every replica, so log lines
// of one client can be told apart without the key being written.
func KeyHash(key string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// String is PolicyHeader's value:
//
//	<namespace>/<policy>;decision=denied;reason=RateLimited;limit=<name>;remaining=0;key=<hash>
//
// with limit, remaining and key only when a limit reports.
func (r Rule) String() string {
	b := make([]byte, 0, 128)
	b = append(b, r.Policy...)
	b = append(b, ";decision="...)
	b = append(b, r.Decision...)
	b = append(b, ";reason="...)
	b = append(b, r.Reason...)
	if r.Limit != "" {
		b = append(b, ";limit="...)
		b = append(b, r.Limit...)
		b = append(b, ";remaining="...)
		b = strconv.AppendInt(b, r.Remaining, 10)
		b = append(b, ";key="...)
		b = append(b, r.KeyHash...)
	}
	return string(b)
}
