package ratelimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// ReserveStep is one call of RunReserves: Action (Consume, DryRun,
// Settle or Refund) of Cost for Holder, on every limit of the example at
// once, at the clock moved by Advance. Allowed is the expected decision
// (for a Settle: it settled something); Want, each entry's expected
// figures after the call.
type ReserveStep struct {
	Advance time.Duration
	Action  ratelimit.Action
	Holder  string
	Cost    int64
	Allowed bool
	Want    []Figures
}

// Figures are the Result fields a ReserveStep checks.
type Figures struct{ Remaining, Reserved, Settled int64 }

// ReserveExample is a timeline of reservations (Entry.Reserve, live for
// TTL) and their settlements on the limits of one bucket.
type ReserveExample struct {
	Name   string
	Limits []ratelimit.Limit
	TTL    time.Duration
	Steps  []ReserveStep
}

func take(holder string, cost int64, allowed bool, want ...Figures) ReserveStep {
	return ReserveStep{Holder: holder, Cost: cost, Allowed: allowed, Want: want}
}

func settleStep(holder string, actual int64, settled bool, want ...Figures) ReserveStep {
	return ReserveStep{Action: ratelimit.Settle, Holder: holder, Cost: actual, Allowed: settled, Want: want}
}

// ReserveExamples are the rules of reservations and settlements, on one
// limit of each algorithm but Concurrency that gives nothing back within
// the timeline (capacity 100), then on limits whose windows end: less
// than reserved is given back, more is taken (into debt, capped at one
// capacity), what belonged to an ended window is dropped; a settlement
// of a holder that holds nothing changes nothing (never reserved, denied,
// settled already, ended: a reservation never settled stays charged); a
// duplicate admission is denied and its settlement changes nothing, the
// original's still settles; a dry run reports and writes nothing.
func ReserveExamples() []ReserveExample {
	var out []ReserveExample
	for _, l := range NoRefillLimits(100) {
		if l.Algorithm == ratelimit.Concurrency {
			continue
		}
		out = append(out, ReserveExample{Name: l.Algorithm.String() + "/reserve-and-settle", Limits: []ratelimit.Limit{l}, TTL: time.Hour, Steps: reserveSteps()},
			ReserveExample{Name: l.Algorithm.String() + "/debt-capped", Limits: []ratelimit.Limit{l}, TTL: time.Hour, Steps: debtSteps(l.Algorithm)})
	}
	minute := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Minute}
	month := ratelimit.CalendarLimit(1000, ratelimit.Month, mustZone("Europe/Berlin"))
	return append(out, ReserveExample{
		Name: "FixedWindow+Calendar/window-ended", Limits: []ratelimit.Limit{minute, month}, TTL: 5 * time.Minute,
		Steps: []ReserveStep{
			take("a", 10, true, Figures{Remaining: 90, Reserved: 10}, Figures{Remaining: 990, Reserved: 10}),
			take("b", 10, true, Figures{Remaining: 80, Reserved: 20}, Figures{Remaining: 980, Reserved: 20}),
			// The minute's window ends: what it gets back is dropped, what
			// it is owed is taken from the new window; the month adjusts.
			{Advance: time.Minute, Action: ratelimit.Settle, Holder: "a", Cost: 2, Allowed: true,
				Want: []Figures{{Remaining: 100, Reserved: 10, Settled: 10}, {Remaining: 988, Reserved: 10, Settled: 10}}},
			settleStep("b", 30, true, Figures{Remaining: 80, Settled: 10}, Figures{Remaining: 968, Settled: 10}),
			// A reservation never settled stays charged; its record goes.
			take("c", 50, true, Figures{Remaining: 30, Reserved: 50}, Figures{Remaining: 918, Reserved: 50}),
			{Advance: 5 * time.Minute, Action: ratelimit.DryRun, Allowed: true, Want: []Figures{{Remaining: 100}, {Remaining: 918}}},
			settleStep("c", 0, false, Figures{Remaining: 100}, Figures{Remaining: 918}),
		},
	})
}

func reserveSteps() []ReserveStep {
	return []ReserveStep{
		take("a", 30, true, Figures{Remaining: 70, Reserved: 30}),
		take("b", 20, true, Figures{Remaining: 50, Reserved: 50}),
		// A dry run reports what a reservation would, and writes nothing.
		{Action: ratelimit.DryRun, Holder: "c", Cost: 5, Allowed: true, Want: []Figures{{Remaining: 45, Reserved: 55}}},
		take("a", 10, false, Figures{Remaining: 50, Reserved: 50}),                   // a duplicate: denied, counted
		settleStep("a", 5, false, Figures{Remaining: 50, Reserved: 50}),              // the duplicate's: nothing
		settleStep("a", 10, true, Figures{Remaining: 70, Reserved: 20, Settled: 30}), // less: 20 back
		settleStep("a", 10, false, Figures{Remaining: 70, Reserved: 20}),             // settled already
		settleStep("b", 60, true, Figures{Remaining: 30, Settled: 20}),               // more: 40 taken
		settleStep("never", 7, false, Figures{Remaining: 30}),
		take("c", 30, true, Figures{Remaining: 0, Reserved: 30}),
		settleStep("c", 30, true, Figures{Remaining: 0, Settled: 30}), // exactly: nothing moves
		take("d", 1, false, Figures{Remaining: 0}),                    // denied: no reservation
		settleStep("d", 1, false, Figures{Remaining: 0}),
		// Reservations of a limit with no room: a dry run without a
		// holder (an operator's inspection) reports them.
		{Action: ratelimit.DryRun, Cost: 0, Allowed: true, Want: []Figures{{Remaining: 0}}},
	}
}

// debtSteps settle more than was reserved, taken whatever the limit says:
// a window or a bucket goes up to one capacity into debt; a leaky bucket
// or GCRA takes at most one capacity more (its ChargeAlways), so its
// level is then 120, not 200.
func debtSteps(alg ratelimit.Algorithm) []ReserveStep {
	var back int64 // what remains once 100 are given back
	if alg == ratelimit.LeakyBucket || alg == ratelimit.GCRA {
		back = 80
	}
	return []ReserveStep{
		take("x", 10, true, Figures{Remaining: 90, Reserved: 10}),
		{Action: ratelimit.DryRun, Cost: 0, Allowed: true, Want: []Figures{{Remaining: 90, Reserved: 10}}},
		take("y", 10, true, Figures{Remaining: 80, Reserved: 20}),
		// 500 used where 10 were reserved: 490 taken whatever the limit
		// says, into debt capped at one capacity (two hundred spent).
		settleStep("x", 500, true, Figures{Remaining: 0, Reserved: 10, Settled: 10}),
		take("z", 1, false, Figures{Remaining: 0, Reserved: 10}),
		{Action: ratelimit.Refund, Cost: 100, Allowed: true, Want: []Figures{{Remaining: back}}},
		{Action: ratelimit.Refund, Cost: 1, Allowed: true, Want: []Figures{{Remaining: back + 1}}},
		settleStep("y", 0, true, Figures{Remaining: back + 11, Settled: 10}),
	}
}

// RunReserves runs every ReserveExample against a store built by newStore,
// each on a fresh bucket and a clock aligned to an hour, alone and beside
// the limits of another policy (Besides: their entries reserve and settle
// too, as a request's do, and never decide).
func RunReserves(t *testing.T, newStore func(t *testing.T, clock *Clock) ratelimit.Store) {
	for _, beside := range Besides {
		t.Run(beside.Name, func(t *testing.T) {
			for i, ex := range ReserveExamples() {
				t.Run(ex.Name, func(t *testing.T) { runReserve(t, newStore, ex, i, beside) })
			}
		})
	}
}

func runReserve(t *testing.T, newStore func(t *testing.T, clock *Clock) ratelimit.Store, ex ReserveExample, i int, beside Beside) {
	clock := FutureClock()
	store := newStore(t, clock)
	run := fmt.Sprint(time.Now().UnixNano(), "-", i)
	others := besideKeys(ratelimit.Key("reserves", "budget", run, "l0"), run, beside.Others)
	window := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Hour}
	var dec ratelimit.Decision
	for n, st := range ex.Steps {
		clock.Advance(st.Advance)
		req := ReserveRequest(ex, run, st)
		for _, k := range others {
			e := ratelimit.Entry{Key: k, Limit: window, Cost: 1, Holder: st.Holder, Reserve: req.Entries[0].Reserve}
			if st.Action == ratelimit.Settle {
				e.Holder = "beside" // holds nothing there
			}
			req.Entries = append(req.Entries, e)
		}
		if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		if dec.Allowed != st.Allowed {
			t.Fatalf("step %d (%v %s cost %d): allowed %v, want %v (%+v)", n, st.Action, st.Holder, st.Cost, dec.Allowed, st.Allowed, dec.Results)
		}
		for q, w := range st.Want {
			r := dec.Results[q]
			if got := (Figures{Remaining: r.Remaining, Reserved: r.Reserved, Settled: r.Settled}); got != w {
				t.Fatalf("step %d (%v %s cost %d) limit %d: got %+v, want %+v (%+v)", n, st.Action, st.Holder, st.Cost, q, got, w, r)
			}
		}
	}
}

// ReserveRequest is step st of example ex as a request, on bucket run.
func ReserveRequest(ex ReserveExample, run string, st ReserveStep) ratelimit.Request {
	req := ratelimit.Request{Action: st.Action}
	for q, l := range ex.Limits {
		e := ratelimit.Entry{Key: ratelimit.Key("reserves", "budget", run, fmt.Sprint("l", q)), Limit: l, Cost: st.Cost, Holder: st.Holder}
		if st.Action.Decides() {
			e.Reserve = ex.TTL
		}
		req.Entries = append(req.Entries, e)
	}
	return req
}
