package ratelimit

import (
	"fmt"
	"time"
)

// MaxPenaltyDuration bounds Penalty's durations (a leap year): a ban's
// end plus MaxBan stays far below 2^52µs on any clock of this century.
const MaxPenaltyDuration = 366 * 24 * time.Hour

// Penalty is a bucket's penalty box: a bucket (a policy and a key value)
// whose own limits deny Denials requests within Within is banned for Ban;
// banned again before MaxBan has passed since its last ban ended, it is
// banned for twice its last ban, at most MaxBan. While banned, every
// request of the bucket is denied, until the ban's end, without being
// counted: none of its limits is consumed (not even those that charge
// always) and those denials count towards no new ban. A refund neither
// lifts a ban nor changes the count. A shadow bucket keeps the same state
// and reports the bans it would issue, but is never denied by one.
//
// The zero Penalty is none. The stores apply, per bucket, the penalty of
// its first entry that has one; the entries of one policy's bucket all
// carry the policy's.
type Penalty struct {
	// Denials is how many denials within Within ban the bucket; 1..MaxCount.
	Denials int64
	// Within is the span the denials are counted in, from the first
	// of them: a denial after it starts a new count.
	Within time.Duration
	// Ban is the first ban's length; at most MaxBan.
	Ban time.Duration
	// MaxBan caps a doubled ban, and is how long after a ban's end a new
	// ban still doubles it.
	MaxBan time.Duration
	// Shadow: the box reports the bans it would issue, never enforcing
	// them, and counts every entry's denial; otherwise it counts only
	// the denials of entries that are not shadow. A policy's box follows
	// its spec.mode, whatever its limits' own modes (Entry.Shadow).
	Shadow bool
}

// Enabled reports whether p is a penalty box, not the zero Penalty.
func (p Penalty) Enabled() bool { return p.Denials > 0 }

// Validate checks p's bounds: each duration a whole number of µs in
// 1µs..MaxPenaltyDuration, and Ban <= MaxBan. The zero Penalty is valid.
func (p Penalty) Validate() error {
	if p == (Penalty{}) {
		return nil
	}
	if p.Denials < 1 || p.Denials > MaxCount {
		return fmt.Errorf("%w: penalty denials %d outside 1..%d", ErrInvalidLimit, p.Denials, MaxCount)
	}
	for _, d := range [...]struct {
		name string
		d    time.Duration
	}{{"within", p.Within}, {"ban", p.Ban}, {"maxBan", p.MaxBan}} {
		if d.d < time.Microsecond || d.d > MaxPenaltyDuration || d.d%time.Microsecond != 0 {
			return fmt.Errorf("%w: penalty %s %s outside 1µs..%s or not whole µs", ErrInvalidLimit, d.name, d.d, MaxPenaltyDuration)
		}
	}
	if p.Ban > p.MaxBan {
		return fmt.Errorf("%w: penalty ban %s longer than maxBan %s", ErrInvalidLimit, p.Ban, p.MaxBan)
	}
	return nil
}

func (p Penalty) String() string {
	return fmt.Sprintf("Penalty{denials=%d within=%s ban=%s maxBan=%s shadow=%v}", p.Denials, p.Within, p.Ban, p.MaxBan, p.Shadow)
}
