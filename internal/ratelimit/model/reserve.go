package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// Reservation is what one holder reserved in a limit of any algorithm but
// Concurrency (ratelimit.Entry.Reserve): Cost units taken at At (µs),
// recorded until End (µs), when the record goes and the units stay
// charged. Pending counts the admissions of the same holder denied since
// (its duplicates), whose settlements are still to come: each changes
// nothing, so only the holder's last settlement settles (as Hold counts a
// concurrency hold's). A limit's reservations are kept beside its State,
// whatever its algorithm: a limit edited to another algorithm keeps them.
type Reservation struct {
	Holder                 string
	Cost, At, End, Pending int64
}

// Reserves reports whether entry e of a request doing action reads and
// writes its limit's reservations (ApplyReserved): it reserves (Reserve
// on a Consume or a DryRun) or it is settled.
func Reserves(e *ratelimit.Entry, action ratelimit.Action) bool {
	if e.Limit.Algorithm == ratelimit.Concurrency {
		return false
	}
	return action == ratelimit.Settle || e.Reserve > 0 && action.Decides()
}

// LiveReservations returns those of res live at now (End > now), in
// their order, and the units they hold. res is not modified: live is res
// itself when all are live, else a copy.
func LiveReservations(res []Reservation, now int64) (live []Reservation, held int64) {
	n := 0
	for i := range res {
		if res[i].End > now {
			n++
			held += res[i].Cost
		}
	}
	if n == len(res) {
		return res, held
	}
	live = make([]Reservation, 0, n)
	for _, r := range res {
		if r.End > now {
			live = append(live, r)
		}
	}
	return live, held
}

func reservationIndex(res []Reservation, holder string) int {
	for i := range res {
		if res[i].Holder == holder {
			return i
		}
	}
	return -1
}

// ApplyReserved is Apply for an entry that Reserves: res is its limit's
// reservations. Besides Apply's verdict and next state (written as
// Writes says, or for a Settle when next.Alg is not 0), it returns the
// reservations to store (StoresReserved says when, given the request's
// decision). v.Reserved and v.ReservedAfter
// are the units the live reservations hold before and after consuming;
// v.Settled the reservation a Settle replaced. s and res are not
// modified.
func ApplyReserved(p Params, s *State, res []Reservation, now int64, e *ratelimit.Entry, action ratelimit.Action) (v Verdict, next State, after []Reservation) {
	if action == ratelimit.Settle {
		return settle(p, s, res, now, e.Holder, e.Cost)
	}
	return reserve(p, s, res, now, e)
}

// reserve is a Consume's (or a DryRun's) evaluation of entry e with a
// reservation: the cost as Check takes it, recorded as e.Holder's until
// e.Reserve from now (after, to store when consumed). A holder that holds
// a live reservation is a duplicate: denied, at the earliest until its
// reservation ends, and counted in it (after, stored whatever the
// decision); next is then none: a duplicate takes nothing.
func reserve(p Params, s *State, res []Reservation, now int64, e *ratelimit.Entry) (v Verdict, next State, after []Reservation) {
	live, held := LiveReservations(res, now)
	mine := -1
	if e.Cost > 0 && e.Holder != "" {
		mine = reservationIndex(live, e.Holder)
	}
	v, next = Check(p, s, now, e.Cost)
	v.Reserved, v.ReservedAfter = held, held
	if mine >= 0 {
		end := live[mine].End - now
		switch {
		case v.Allowed:
			deny(&v, end)
		case v.RetryAfter != Never && v.RetryAfter < end:
			v.RetryAfter = end
		}
		v.Dup = true
		after = append(make([]Reservation, 0, len(live)), live...)
		after[mine].Pending = min(after[mine].Pending+1, ratelimit.MaxCount)
		return v, State{}, after
	}
	if v.Allowed && e.Cost > 0 && e.Holder != "" {
		v.ReservedAfter = held + e.Cost
		after = append(append(make([]Reservation, 0, len(live)+1), live...),
			Reservation{Holder: e.Holder, Cost: e.Cost, At: now, End: now + e.Reserve.Microseconds()})
	}
	return v, next, after
}

// settle replaces holder's live reservation R by actual (ratelimit's
// Settle): the state gets R - actual back as Refund gives back, or takes
// actual - R as CheckAlways takes; after is the reservations without R.
// With duplicates of the holder pending, one is counted off and nothing
// else changes (next is none, v.Dup reports it). v holds the figures
// after (the After fields equal to the others): allowed when R was
// settled, else denied with RetryAfter Never.
func settle(p Params, s *State, res []Reservation, now int64, holder string, actual int64) (v Verdict, next State, after []Reservation) {
	live, held := LiveReservations(res, now)
	i := reservationIndex(live, holder)
	ok := false
	switch {
	case i >= 0 && live[i].Pending > 0:
		after = append(make([]Reservation, 0, len(live)), live...)
		after[i].Pending--
		v, _ = Check(p, s, now, 0)
		v.Dup = true
	case i >= 0:
		r := live[i].Cost
		after = append(append(make([]Reservation, 0, len(live)-1), live[:i]...), live[i+1:]...)
		held -= r
		v, next = settled(p, s, now, r, actual)
		ok, v.Settled = true, r
	default:
		v, _ = Check(p, s, now, 0)
	}
	v.RemainingAfter, v.ResetAfter = v.Remaining, v.Reset
	v.Reserved, v.ReservedAfter = held, held
	v.Allowed, v.RetryAfter = ok, 0
	if !ok {
		v.RetryAfter = Never
	}
	return v, next, after
}

// settled moves state s by actual - reserved: the figures after it (in
// Remaining and Reset) and the state to store (Alg 0: none).
func settled(p Params, s *State, now, reserved, actual int64) (v Verdict, next State) {
	switch {
	case actual < reserved:
		return Refund(p, s, now, reserved-actual)
	case actual > reserved:
		v, next = CheckAlways(p, s, now, actual-reserved)
		v.Remaining, v.Reset = v.RemainingAfter, v.ResetAfter
		return v, next
	}
	v, _ = Check(p, s, now, 0)
	return v, State{}
}

// StoresReserved reports whether the reservations ApplyReserved returned
// for an entry (evaluated to v, in a request decided allowed or not) are
// stored: a new one when consumed (the decision and v allowed, a cost
// taken), a duplicate's count whatever the decision, and every change a
// Settle makes. Not on a dry run, which writes nothing.
func StoresReserved(allowed bool, v *Verdict, action ratelimit.Action, after []Reservation) bool {
	switch {
	case action == ratelimit.DryRun:
		return false
	case action == ratelimit.Settle:
		return v.Allowed || v.Dup
	case v.Dup:
		return true
	}
	return allowed && v.Allowed && after != nil
}

// ReservationsEnd is when the last of res ends (µs; 0 when none): the
// bucket that keeps them lives at least until then.
func ReservationsEnd(res []Reservation) int64 {
	var end int64
	for i := range res {
		end = max(end, res[i].End)
	}
	return end
}
