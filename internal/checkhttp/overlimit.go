package checkhttp

import "github.com/sluice-dev/sluice/internal/check"

// OverLimitHeader is the header the request that goes on to the upstream
// carries when it is over soft limits (check.Outcome.SoftOver), naming
// each, parseable as PolicyHeader's value is:
//
//	<namespace>/<policy>;limit=<name>;mode=Soft[, <namespace>/<policy>;limit=<name>;mode=Soft]
//
// It is sent whatever --report-policy says: it is the application's, for
// degrading gracefully, not the access log's. Every intake that can set a
// header on the upstream request sets it, and removes one the client sent.
const OverLimitHeader = "X-Sluice-Over-Limit"

// AppendOverLimit appends OverLimitHeader's value for out to buf; nothing
// when the request is over no soft limit (or was denied). A limit met by
// several parts of one request is named once.
func AppendOverLimit(buf []byte, out *check.Outcome) []byte {
	start := len(buf)
	for i := range out.Limits {
		lr := &out.Limits[i]
		if !out.SoftOver(lr) || namedBefore(out, i) {
			continue
		}
		if len(buf) > start {
			buf = append(buf, ", "...)
		}
		buf = append(buf, lr.Policy.Namespace...)
		buf = append(buf, '/')
		buf = append(buf, lr.Policy.Name...)
		buf = append(buf, ";limit="...)
		buf = append(buf, lr.Limit.Name...)
		buf = append(buf, ";mode="...)
		buf = append(buf, lr.Limit.Mode...)
	}
	return buf
}

// OverLimit is OverLimitHeader's value for out, "" when it is not sent.
func OverLimit(out *check.Outcome) string {
	if !overAny(out) {
		return ""
	}
	return string(AppendOverLimit(nil, out))
}

// overAny reports whether out is over a soft limit, without rendering.
func overAny(out *check.Outcome) bool {
	for i := range out.Limits {
		if out.SoftOver(&out.Limits[i]) {
			return true
		}
	}
	return false
}

// namedBefore reports whether a soft limit over before i has i's policy
// and limit name (the same limit met by several descriptors).
func namedBefore(out *check.Outcome, i int) bool {
	lr := &out.Limits[i]
	for j := range i {
		o := &out.Limits[j]
		if o.Policy == lr.Policy && o.Limit.Name == lr.Limit.Name && out.SoftOver(o) {
			return true
		}
	}
	return false
}
