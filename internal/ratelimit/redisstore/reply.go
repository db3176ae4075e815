package redisstore

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// parseReply reads one call's segment of a reply (see command.deliver):
// the decision, then four integers per entry of idx (see lua/sluice.lua):
// retry-after (0 when the entry allows), remaining, reset, reset after
// consuming. What remains after consuming is remaining minus the cost for
// an entry that allows (every algorithm counts so), 0 for one charged all
// the same (its cost did not fit), else remaining; a refund reports the
// figures after it in all four.
// A bucket's penalty box has four values of its own before its entries'
// (see penaltyReply): its ban marks the entries it denied Banned, the
// ban the call issued goes to each entry's Ban, and either one's length
// from the call on to each entry's BanLeft.
// Then two per entry that reserves or settles (model.Reserves): the
// units reserved (before consuming; after a settlement) and the
// reservation settled (see reservedReply).
// It fills verdicts[i] for i in idx and returns the call's decision.
// Anything unexpected is an error, never a panic.
func parseReply(vals []int64, req *ratelimit.Request, buckets []string, idx []int, verdicts []model.Verdict) (bool, error) {
	n, x := callEntries(req, buckets, idx), reservingEntries(req, idx)
	if len(vals) != 1+replyValues*n+2*x {
		return false, fmt.Errorf("unexpected reply of %d values for %d entries, %d of them reserving", len(vals), n, x)
	}
	decision, err := boolOf(vals[0])
	if err != nil {
		return false, fmt.Errorf("unexpected decision: %w", err)
	}
	want, release := true, req.Action == ratelimit.Release || req.Action == ratelimit.Settle
	freed := false
	var banned bool
	var issued, banLeft int64
	k, bucket := 0, ""
	for q, i := range idx {
		e := &req.Entries[i]
		if box := boxOf(req, buckets, idx, q); box != nil {
			left, ban, err := penaltyReply(vals[1+replyValues*k:1+replyValues*(k+1)], box)
			if err != nil {
				return false, fmt.Errorf("unexpected reply for %s: %w", e.Key, err)
			}
			banned, issued, k = left > 0 && !box.Penalty.Shadow, ban, k+1
			banLeft = 0
			if !box.Penalty.Shadow {
				banLeft = left + ban // one of them is 0 (penaltyReply)
			}
		} else if q == 0 || buckets[i] != bucket {
			banned, issued, banLeft = false, 0, 0
		}
		bucket = buckets[i]
		f := vals[1+replyValues*k : 1+replyValues*(k+1)]
		k++
		v := model.Verdict{Allowed: f[0] == 0, RetryAfter: f[0], Remaining: f[1], Reset: f[2], RemainingAfter: f[1], ResetAfter: f[3], Banned: banned, Ban: issued, BanLeft: banLeft}
		switch {
		case req.Action == ratelimit.Settle && e.Limit.Algorithm != ratelimit.Concurrency:
			if !v.Allowed && v.RetryAfter != model.Never {
				return false, fmt.Errorf("unexpected reply for %s: a settlement that settled nothing with retry-after %d", e.Key, v.RetryAfter)
			}
		case req.Action == ratelimit.Refund:
			if !v.Allowed {
				return false, fmt.Errorf("unexpected reply for %s: a refund denied", e.Key)
			}
		case release && e.Limit.Algorithm != ratelimit.Concurrency:
			if !v.Allowed {
				return false, fmt.Errorf("unexpected reply for %s: a refund denied", e.Key)
			}
		case release:
			if !v.Allowed && v.RetryAfter != model.Never {
				return false, fmt.Errorf("unexpected reply for %s: a release that freed nothing with retry-after %d", e.Key, v.RetryAfter)
			}
		case v.Allowed:
			v.RemainingAfter -= e.Cost
		case e.ChargeAlways && e.Cost > 0:
			v.RemainingAfter = 0
		}
		if err := checkVerdict(&v, e); err != nil {
			return false, fmt.Errorf("unexpected reply for %s: %w", e.Key, err)
		}
		verdicts[i] = v
		if !v.Allowed && !e.Shadow {
			want = false
		}
		freed = freed || v.Allowed && (e.Limit.Algorithm == ratelimit.Concurrency || req.Action == ratelimit.Settle)
	}
	if x > 0 {
		if err := reservedReply(vals[1+replyValues*n:], req, idx, verdicts); err != nil {
			return false, err
		}
	}
	if release {
		want = freed
	}
	if decision != want {
		return false, fmt.Errorf("unexpected reply: decision %v disagrees with its entries", decision)
	}
	return decision, nil
}

// reservingEntries is how many entries of idx reserve or settle.
func reservingEntries(req *ratelimit.Request, idx []int) int {
	x := 0
	for _, i := range idx {
		if model.Reserves(&req.Entries[i], req.Action) {
			x++
		}
	}
	return x
}

// reservedReply reads the two values of each entry of idx that reserves
// or settles into its verdict: the units reserved, then (on a check with
// a holder, for an entry that allows) with its own cost; the reservation
// settled, and checks them.
func reservedReply(f []int64, req *ratelimit.Request, idx []int, verdicts []model.Verdict) error {
	k := 0
	for _, i := range idx {
		e := &req.Entries[i]
		if !model.Reserves(e, req.Action) {
			continue
		}
		v := &verdicts[i]
		reserved, settled := f[k], f[k+1]
		k += 2
		switch {
		case reserved < 0 || reserved > ratelimit.MaxUnits:
			return fmt.Errorf("unexpected reply for %s: %d units reserved", e.Key, reserved)
		case settled < 0 || settled > ratelimit.MaxCount || settled > 0 && (req.Action != ratelimit.Settle || !v.Allowed):
			return fmt.Errorf("unexpected reply for %s: a reservation of %d settled", e.Key, settled)
		}
		v.Reserved, v.ReservedAfter, v.Settled = reserved, reserved, settled
		if req.Action != ratelimit.Settle && v.Allowed && e.Cost > 0 && e.Holder != "" {
			v.ReservedAfter += e.Cost
		}
	}
	return nil
}

// replyValues is the number of reply values per entry.
const replyValues = 4

func boolOf(n int64) (bool, error) {
	switch n {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("flag %d is not 0 or 1", n)
}

func checkVerdict(v *model.Verdict, e *ratelimit.Entry) error {
	switch {
	case v.Remaining < 0 || v.RemainingAfter < 0 || v.Remaining > ratelimit.MaxCount:
		return fmt.Errorf("remaining %d/%d out of range", v.Remaining, v.RemainingAfter)
	case v.Reset < 0 || v.ResetAfter < 0:
		return fmt.Errorf("reset %d/%d negative", v.Reset, v.ResetAfter)
	case !v.Allowed && v.RetryAfter < 1 && v.RetryAfter != model.Never:
		return fmt.Errorf("retry-after %d on a denied entry", v.RetryAfter)
	case !v.Allowed && v.ResetAfter != v.Reset && !e.ChargeAlways:
		return fmt.Errorf("reset after consuming %d differs from reset %d on a denied entry", v.ResetAfter, v.Reset)
	}
	return nil
}
