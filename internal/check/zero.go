package check

import (
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// zeroUse is a limit of 0 (policy.Limit.AdmitsNothing) of the matching
// policy owner, met with cost; or (untracked) a concurrency limit whose
// holder Sluice cannot track, which likewise admits nothing that costs.
type zeroUse struct {
	owner, limit int
	key          string
	cost         int64
	untracked    bool
}

// decideZeros decides the limits of 0 the request met, before the cache
// of denials and the store are asked: such a limit has no bucket, so
// nothing is ever counted there. An enforced one denies a request of any
// cost, which then consumes nothing anywhere (it reports whether one
// did); a check of cost 0 passes. Each reports 0 remaining, no retry
// ever, and as its reset the end of its window on the clock, as
// envoyproxy/ratelimit reports a limit of 0 (a limit of 0 is always a
// descriptor's own limit: policy.DescriptorLimit's clock-aligned window).
// An untracked holder's limit reports no reset, and its denial's reason
// (InvalidHolder) is the request's.
func decideZeros(sc *scratch, out *Outcome, now time.Time) bool {
	for _, z := range sc.zeros {
		pr := &out.Policies[z.owner]
		r := ratelimit.Result{Allowed: z.cost == 0}
		reason := ReasonInvalidHolder
		if !z.untracked {
			r.Reset, reason = untilWindowEnds(pr.Limits()[z.limit].Limit.Interval, now), ReasonLimited
		}
		if !r.Allowed {
			r.RetryAfter = ratelimit.Never
			if pr.Limits()[z.limit].Enforced() && (out.Allowed || z.untracked) {
				out.Allowed, out.Reason = false, reason
			}
		}
		addLimit(out, z.owner, z.limit, z.key, r)
	}
	return !out.Allowed
}

// untilWindowEnds is the time from now to the end of the clock-aligned
// window of the given length (windows are its multiples since the Unix
// epoch), rounded up to the microsecond as the engine's durations are.
func untilWindowEnds(window time.Duration, now time.Time) time.Duration {
	w := window.Microseconds()
	return time.Duration(w-now.UnixMicro()%w) * time.Microsecond
}
