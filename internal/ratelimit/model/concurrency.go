package model

import (
	"sort"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Hold is what one holder holds in a Concurrency limit: Cost units since
// At (µs), until it releases them or At+Interval (the lease timeout).
// Pending counts the admissions of the same holder denied since (its
// duplicates), whose releases are still to come: each frees nothing, so
// only the last release of the holder frees its units.
type Hold struct {
	Holder  string
	Cost    int64
	At      int64
	Pending int64
}

// concurrency: a cost fits when the live holds (admitted less than
// Interval ago and not released) plus it are at most Capacity and holder
// holds nothing yet (an empty holder, the model's own checks, never
// collides). An admitted cost is held from now, or from the latest
// admission if that is later (times never decrease, so holds are in order
// of their ends). Remaining is Capacity minus what is held; Reset runs to
// the end of the latest admission's lease while anything is held (a
// release does not shorten it: it is the bucket's expiry, which never
// moves earlier). A cost of 0 holds nothing. An admission of a holder that
// holds (a duplicate) is denied, and remembered in its hold whatever the
// request's decision (next then holds it, while v denies): Envoy sends the
// duplicate's release too, naming the same holder, and that release must
// free nothing (see Release).
func concurrency(p Params, s *State, now, cost int64, holder string) (v Verdict, next State) {
	live, held, last := liveHolds(p, s, now)
	v.Remaining = max(p.Capacity-held, 0)
	if held > 0 {
		v.Reset = last + p.Interval - now
	}
	mine := -1
	if cost > 0 && holder != "" {
		mine = holdIndex(live, holder)
	}
	dup := mine >= 0
	switch {
	case cost > p.Capacity:
		deny(&v, Never)
	case !dup && held+cost <= p.Capacity:
		if cost == 0 {
			allow(&v, v.Remaining, v.Reset)
			break
		}
		at := max(now, last)
		allow(&v, p.Capacity-held-cost, at+p.Interval-now)
		next = State{Alg: ratelimit.Concurrency, B: at, Holds: append(live, Hold{Holder: holder, Cost: cost, At: at})}
	default:
		deny(&v, holdRetryAt(p, live, held, cost, holder, dup)-now)
	}
	if dup {
		next = withPending(live, last, mine, 1)
	}
	return v, next
}

// withPending is the state of the live holds, the latest admitted at
// last, with hold i's count of pending duplicates moved by d (at most
// ratelimit.MaxCount); the holds are copied, not changed.
func withPending(live []Hold, last int64, i int, d int64) State {
	holds := append(make([]Hold, 0, len(live)), live...)
	holds[i].Pending = min(holds[i].Pending+d, ratelimit.MaxCount)
	return State{Alg: ratelimit.Concurrency, B: last, Holds: holds}
}

// holdRetryAt is the earliest time cost fits if nothing else arrives: when
// enough holds have ended, holder's own among them.
func holdRetryAt(p Params, live []Hold, held, cost int64, holder string, dup bool) int64 {
	for i := 0; i < len(live); {
		end := live[i].At + p.Interval
		for ; i < len(live) && live[i].At+p.Interval <= end; i++ {
			held -= live[i].Cost
			if live[i].Holder == holder {
				dup = false
			}
		}
		if !dup && held+cost <= p.Capacity {
			return end
		}
	}
	return live[len(live)-1].At + p.Interval // unreachable for a cost within the capacity
}

// liveHolds returns s's holds still live at now, what they hold, and the
// time of the latest admission (0 when s is untouched).
func liveHolds(p Params, s *State, now int64) (live []Hold, held, last int64) {
	if s.Alg != ratelimit.Concurrency {
		return nil, 0, 0
	}
	i := sort.Search(len(s.Holds), func(i int) bool { return s.Holds[i].At+p.Interval > now })
	// An admission appends in s.Holds' spare capacity, as a log's does
	// (see Check): amortized O(1), and s's own holds stay as they were.
	live = s.Holds[i:]
	for _, h := range live {
		held += h.Cost
	}
	return live, held, s.B
}

func holdIndex(holds []Hold, holder string) int {
	for i := range holds {
		if holds[i].Holder == holder {
			return i
		}
	}
	return -1
}

// Release frees what holder holds in the Concurrency limit of state s at
// time now (ratelimit.Request's Release): its live hold, if it has one
// and no duplicate of it is pending; with one pending, the release is
// that denied duplicate's, which held nothing: it frees nothing and counts
// the duplicate off. v holds the figures after the release (with the
// After fields equal to the others), allowed when something was freed,
// else denied with RetryAfter Never; next is the state to store, with Alg
// 0 when nothing changed. s is not modified.
func Release(p Params, s *State, now int64, holder string) (v Verdict, next State) {
	var st State
	if s != nil && s.Alg == p.Alg && p.Alg == ratelimit.Concurrency {
		st = *s
	}
	live, held, last := liveHolds(p, &st, now)
	freed := false
	i := -1
	if holder != "" {
		i = holdIndex(live, holder)
	}
	switch {
	case i >= 0 && live[i].Pending > 0:
		next = withPending(live, last, i, -1)
	case i >= 0:
		freed, held = true, held-live[i].Cost
		next = State{Alg: ratelimit.Concurrency, B: last, Holds: append(append(make([]Hold, 0, len(live)-1), live[:i]...), live[i+1:]...)}
	}
	v.Remaining = max(p.Capacity-held, 0)
	if held > 0 {
		v.Reset = last + p.Interval - now
	}
	v.RemainingAfter, v.ResetAfter = v.Remaining, v.Reset
	v.Allowed = freed
	if !freed {
		v.RetryAfter = Never
	}
	return v, next
}

// Apply is what a request doing action does to entry e's state s at time
// now, p being e's compiled limit: the one dispatch every store shares.
// A Refund releases a Concurrency entry's holder (and reports allowed, as
// a refund always does), and so does a Settle (as a Release does); a
// Release refunds the entries of other algorithms. An entry that
// Reserves goes to ApplyReserved instead.
func Apply(p Params, s *State, now int64, e *ratelimit.Entry, action ratelimit.Action) (Verdict, State) {
	conc := p.Alg == ratelimit.Concurrency
	switch {
	case action == ratelimit.Refund && conc:
		v, next := Release(p, s, now, e.Holder)
		v.Allowed, v.RetryAfter = true, 0
		return v, next
	case (action == ratelimit.Release || action == ratelimit.Settle) && conc:
		return Release(p, s, now, e.Holder)
	case action == ratelimit.Refund || action == ratelimit.Release:
		return Refund(p, s, now, e.Cost)
	case conc:
		var st State
		if s != nil && s.Alg == p.Alg {
			st = *s
		}
		return concurrency(p, &st, now, e.Cost, e.Holder)
	case e.ChargeAlways:
		return CheckAlways(p, s, now, e.Cost)
	}
	return Check(p, s, now, e.Cost)
}
