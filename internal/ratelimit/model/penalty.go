package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// PenaltyParams is a ratelimit.Penalty in the integer form the library
// takes: the denials and three durations in µs.
type PenaltyParams struct {
	Denials, Within, Ban, MaxBan int64
}

// CompilePenalty converts a valid Penalty to PenaltyParams.
func CompilePenalty(p ratelimit.Penalty) PenaltyParams {
	return PenaltyParams{Denials: p.Denials, Within: p.Within.Microseconds(), Ban: p.Ban.Microseconds(), MaxBan: p.MaxBan.Microseconds()}
}

// PenaltyState is a bucket's penalty box state; the zero value is
// untouched. Count denials were counted since Start (µs; Count 0: none
// counting); the last ban ended (or ends) at Until and lasted Last µs
// (0, 0: never banned, or long enough ago not to double).
type PenaltyState struct {
	Count, Start, Until, Last int64
}

// BanLeft is how long the ban in force at now lasts (µs); 0 when none.
func (s *PenaltyState) BanLeft(now int64) int64 {
	if now < s.Until {
		return s.Until - now
	}
	return 0
}

// Penalize counts a denial at now of the bucket's own limits, and bans
// the bucket when it is the p.Denials-th within p.Within: for p.Ban, or
// twice the last ban (at most p.MaxBan) when that ended less than
// p.MaxBan ago. It returns the next state and the length of the ban it
// issued (0: none). A banned bucket counts nothing: next is s.
func Penalize(p PenaltyParams, s PenaltyState, now int64) (next PenaltyState, ban int64) {
	if now < s.Until {
		return s, 0
	}
	next = s
	if s.Count > 0 && now < s.Start+p.Within {
		next.Count++
	} else {
		next.Count, next.Start = 1, now
	}
	if next.Count < p.Denials {
		return next, 0
	}
	ban = p.Ban
	if s.Last > 0 && now < s.Until+p.MaxBan {
		ban = min(2*s.Last, p.MaxBan)
	}
	return PenaltyState{Until: now + ban, Last: ban}, ban
}

// Expiry is when s is untouched again (µs): its count's span is over and
// a new ban would no longer double the last one; 0 for the untouched
// state.
func (s *PenaltyState) Expiry(p PenaltyParams) int64 {
	var exp int64
	if s.Count > 0 {
		exp = s.Start + p.Within
	}
	if s.Last > 0 {
		exp = max(exp, s.Until+p.MaxBan)
	}
	return exp
}

// Banned turns v, an entry's verdict, into that of an entry of a bucket
// banned for left more µs: denied until the ban's end, or until its own
// limit admits it if that is later (never early), nothing remaining, and
// not untouched before the ban's end.
func Banned(v *Verdict, left int64) {
	retry := v.RetryAfter
	if v.Allowed || retry != Never && retry < left {
		retry = left
	}
	reset := max(v.Reset, left)
	*v = Verdict{Banned: true, RetryAfter: retry, Reset: reset, ResetAfter: reset, BanLeft: left, Reserved: v.Reserved, ReservedAfter: v.Reserved, Dup: v.Dup}
}

// Box is one bucket's penalty box during one call of a store.
type Box struct {
	// On: the bucket has a penalty box, Params, from its first entry that
	// has one (see Open); Shadow is that penalty's (Penalty.Shadow).
	On     bool
	Params PenaltyParams
	Shadow bool
	// State is the stored state; Next, when Write, the state to store.
	State, Next PenaltyState
	Write       bool
	// Ban is the length of the ban the call issued (0: none).
	Ban     int64
	counted bool
}

// Open gives b entry e's penalty, when b has none yet and e has one,
// and reports whether it did: the caller then sets State, the bucket's
// stored penalty state.
func (b *Box) Open(e *ratelimit.Entry) bool {
	if b.On || !e.Penalty.Enabled() {
		return false
	}
	*b = Box{On: true, Params: CompilePenalty(e.Penalty), Shadow: e.Penalty.Shadow}
	return true
}

// ApplyBans denies, by its ban, every entry whose bucket's box (not a
// shadow one) holds a ban in force at now: the entry's verdict is Banned
// and its next state is none, so that nothing of it is written, not even
// a charge that would be made always; only a duplicate a concurrency
// limit remembers (see concurrency) is kept, as it is whatever the
// decision. bucketOf maps entry i to its box.
func ApplyBans(bucketOf []int, boxes []Box, verdicts []Verdict, nexts []State, now int64) {
	for i, g := range bucketOf {
		b := &boxes[g]
		if !b.On || b.Shadow {
			continue
		}
		if left := b.State.BanLeft(now); left > 0 {
			if !remembersDuplicate(&verdicts[i], &nexts[i]) {
				nexts[i] = State{}
			}
			Banned(&verdicts[i], left)
		}
	}
}

// CountDenials counts a denial (Penalize) in each box whose bucket's own
// entries denied, for a call that is no refund (a dry run reports what it
// would count, and writes nothing), and gives every entry of the bucket
// the ban issued. An enforcing box counts only the denials of entries
// that are not shadow (a limit in mode Shadow or Soft of an enforced
// policy bans no one); a shadow box counts every entry's. A ban issued (not shadow) puts the retry and the reset
// of the bucket's denied entries at its end at the earliest, as a banned
// entry's (Banned): their state is not untouched before the ban ends.
func CountDenials(entries []ratelimit.Entry, bucketOf []int, boxes []Box, verdicts []Verdict, now int64) {
	for i, g := range bucketOf {
		b := &boxes[g]
		if b.On && !b.counted && !verdicts[i].Allowed && (b.Shadow || !entries[i].Shadow) {
			b.counted = true
			b.Next, b.Ban = Penalize(b.Params, b.State, now)
			b.Write = b.Next != b.State
		}
	}
	for i, g := range bucketOf {
		b, v := &boxes[g], &verdicts[i]
		v.Ban = b.Ban
		if b.Ban > 0 && !b.Shadow {
			v.BanLeft = b.Ban
		}
		if b.Ban > 0 && !b.Shadow && !v.Allowed && v.RetryAfter != Never {
			v.RetryAfter = max(v.RetryAfter, b.Ban)
			v.Reset, v.ResetAfter = max(v.Reset, b.Ban), max(v.ResetAfter, b.Ban)
		}
	}
}
