package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// Decide is the decision rule of one atomic call: the request is allowed
// when every non-shadow entry allows it; a Release, when any Concurrency
// entry freed something; a Settle, when any entry settled (or freed)
// something. verdicts is parallel to req.Entries.
func Decide(req *ratelimit.Request, verdicts []Verdict) bool {
	entries := req.Entries
	if req.Action == ratelimit.Settle {
		for i := range verdicts[:len(entries)] {
			if verdicts[i].Allowed {
				return true
			}
		}
		return false
	}
	if req.Action == ratelimit.Release {
		for i := range entries {
			if entries[i].Limit.Algorithm == ratelimit.Concurrency && verdicts[i].Allowed {
				return true
			}
		}
		return false
	}
	for i := range entries {
		if !entries[i].Shadow && !verdicts[i].Allowed {
			return false
		}
	}
	return true
}

// Consumed reports whether an entry's state is the one after consuming: the
// decision allowed, or the entry charges always (also on a dry run, which
// reports what a real call would). A verdict that consumed nothing has the
// same numbers after as before.
func Consumed(allowed bool, e *ratelimit.Entry) bool { return allowed || e.ChargeAlways }

// Writes reports whether entry e, evaluated to v and next (by Apply) in a
// request decided allowed or not, writes next: it costs something and is
// consumed, that is the decision and v allowed, or it charges always and
// v allowed or charged a state, or v denies a concurrency limit's
// duplicate, which its hold remembers whatever the decision. (Not on a
// dry run, which writes nothing.)
func Writes(allowed bool, e *ratelimit.Entry, v *Verdict, next *State) bool {
	switch {
	case e.Cost == 0:
		return false
	case v.Allowed:
		return allowed || e.ChargeAlways
	}
	return e.ChargeAlways && next.Alg != 0 || remembersDuplicate(v, next)
}

// remembersDuplicate reports whether v and next are a concurrency
// limit's denial of a holder that holds, whose hold counts it (next): the
// only denial of that algorithm with a state to write.
func remembersDuplicate(v *Verdict, next *State) bool {
	return !v.Allowed && next.Alg == ratelimit.Concurrency
}

// Result converts v to the caller's Result. consumed (see Consumed) selects
// the numbers after consumption.
func (v *Verdict) Result(consumed bool) ratelimit.Result {
	r := ratelimit.Result{Allowed: v.Allowed, Banned: v.Banned, Ban: ratelimit.MicrosToDuration(v.Ban), BanLeft: ratelimit.MicrosToDuration(v.BanLeft)}
	if consumed {
		r.Remaining, r.Reset, r.Reserved = v.RemainingAfter, ratelimit.MicrosToDuration(v.ResetAfter), v.ReservedAfter
	} else {
		r.Remaining, r.Reset, r.Reserved = v.Remaining, ratelimit.MicrosToDuration(v.Reset), v.Reserved
	}
	r.Settled = v.Settled
	if !v.Allowed {
		r.RetryAfter = ratelimit.MicrosToDuration(v.RetryAfter)
	}
	return r
}
