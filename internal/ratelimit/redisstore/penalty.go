package redisstore

import (
	"fmt"
	"strconv"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// penaltyID is the penalty box's id in the library's arguments: one more
// entry "10:denials:within:ban:maxban:flags" leading its bucket's entries
// (see lua/sluice.lua), with four reply values of its own.
const penaltyID = 10

// boxOf returns the entry whose penalty is the box of the bucket whose
// entries start at idx[p] (adjacent, see adjacentBuckets): its first
// entry with one; nil when the bucket has none, or p starts no bucket,
// or the request is a refund, a release or a settlement (which leave
// penalties alone).
func boxOf(req *ratelimit.Request, buckets []string, idx []int, p int) *ratelimit.Entry {
	if !req.Action.Decides() || p > 0 && buckets[idx[p-1]] == buckets[idx[p]] {
		return nil
	}
	for q := p; q < len(idx) && buckets[idx[q]] == buckets[idx[p]]; q++ {
		if e := &req.Entries[idx[q]]; e.Penalty.Enabled() {
			return e
		}
	}
	return nil
}

// callEntries is how many entries the library gets for idx: one per
// entry and one per penalty box.
func callEntries(req *ratelimit.Request, buckets []string, idx []int) int {
	n := len(idx)
	for p := range idx {
		if boxOf(req, buckets, idx, p) != nil {
			n++
		}
	}
	return n
}

// appendPenalty appends e's penalty box argument to buf.
func appendPenalty(buf []byte, e *ratelimit.Entry) []byte {
	p := model.CompilePenalty(e.Penalty)
	buf = strconv.AppendInt(buf, penaltyID, 10)
	for _, v := range [...]int64{p.Denials, p.Within, p.Ban, p.MaxBan} {
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, v, 10)
	}
	flag := byte('0')
	if e.Penalty.Shadow {
		flag = '1'
	}
	return append(buf, ':', flag)
}

// penaltyReply checks a penalty box's reply values f (the ban left at the
// call's start, the ban issued, the denials counted, the time until the
// state is untouched) and returns the ban left and the ban issued.
func penaltyReply(f []int64, e *ratelimit.Entry) (left, issued int64, err error) {
	maxBan := e.Penalty.MaxBan.Microseconds()
	left, issued = f[0], f[1]
	switch { // a ban in force may predate a lower maxBan
	case left < 0 || left > ratelimit.MaxPenaltyDuration.Microseconds() || issued < 0 || issued > maxBan || left > 0 && issued > 0:
		return 0, 0, fmt.Errorf("penalty ban left %d, issued %d out of range", left, issued)
	case f[2] < 0 || f[2] >= e.Penalty.Denials || f[3] < 0:
		return 0, 0, fmt.Errorf("penalty count %d or reset %d out of range", f[2], f[3])
	}
	return left, issued, nil
}
