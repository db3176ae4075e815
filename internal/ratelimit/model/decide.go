package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// Decide is the decision rule of one atomic call: the request is allowed
// when every non-shadow entry allows it. verdicts is parallel to entries.
func Decide(entries []ratelimit.Entry, verdicts []Verdict) bool {
	for i := range entries {
		if !entries[i].Shadow && !verdicts[i].Allowed {
			return false
		}
	}
	return true
}

// Result converts v to the caller's Result. consumed selects the numbers
// after consumption; it is true when the decision was allowed and v
// allowed (also on a dry run, which reports what a real call would).
func (v *Verdict) Result(consumed bool) ratelimit.Result {
	r := ratelimit.Result{Allowed: v.Allowed}
	if consumed && v.Allowed {
		r.Remaining, r.Reset = v.RemainingAfter, ratelimit.MicrosToDuration(v.ResetAfter)
	} else {
		r.Remaining, r.Reset = v.Remaining, ratelimit.MicrosToDuration(v.Reset)
	}
	if !v.Allowed {
		r.RetryAfter = ratelimit.MicrosToDuration(v.RetryAfter)
	}
	return r
}
