package ratelimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// HolderStep is one call of RunHolders: an admission (Consume) or a
// release of Holder, cost 1, at the clock moved by Advance; Allowed is
// the expected decision (for a release: it freed something).
type HolderStep struct {
	Advance time.Duration
	Action  ratelimit.Action
	Holder  string
	// Cost overrides the cost of 1 when above 0.
	Cost    int64
	Allowed bool
}

// HolderExample is a timeline of admissions and releases of one
// concurrency limit (with the bucket's penalty box when set; shadow: the
// policy is in shadow mode).
type HolderExample struct {
	Name    string
	Limit   ratelimit.Limit
	Penalty ratelimit.Penalty
	Shadow  bool
	Steps   []HolderStep
}

func admit(holder string, allowed bool) HolderStep {
	return HolderStep{Holder: holder, Allowed: allowed}
}

func release(holder string, freed bool) HolderStep {
	return HolderStep{Action: ratelimit.Release, Holder: holder, Allowed: freed}
}

// HolderExamples are the duplicates' rule: an admission of a holder that
// holds is denied, and Envoy sends that denied request's release too,
// naming the same holder; it frees nothing, and only the holder's last
// release frees its units, whatever denied the duplicate (its own limit,
// a cost above the limit, a ban) and in shadow mode alike. A duplicate is
// remembered as long as its hold lives.
func HolderExamples() []HolderExample {
	two := ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 2, Interval: time.Hour}
	return []HolderExample{
		{
			Name:  "duplicates-release-nothing",
			Limit: two,
			Steps: []HolderStep{
				admit("x", true),
				admit("x", false), admit("x", false),
				release("x", false), release("x", false), // the duplicates'
				admit("y", true),
				admit("z", false), // x and y run
				release("x", true),
				admit("z", true),
				release("x", false), // x freed already
				release("y", true),
				release("y", false),
			},
		},
		{
			Name:  "a-duplicate-over-the-limit",
			Limit: two,
			Steps: []HolderStep{
				admit("x", true),
				{Holder: "x", Cost: 3}, // never fits: denied all the same, and remembered
				release("x", false),
				admit("y", true),
				admit("z", false),
			},
		},
		{
			Name:    "a-duplicate-under-a-ban",
			Limit:   ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 1, Interval: time.Hour},
			Penalty: ratelimit.Penalty{Denials: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Minute},
			Steps: []HolderStep{
				admit("x", true),
				admit("x", false), // denied, and banned for a minute
				admit("x", false), // banned
				release("x", false), release("x", false),
				{Advance: time.Minute, Holder: "y"}, // x runs
				release("x", true),
			},
		},
		{
			Name:   "a-shadow-duplicate",
			Limit:  two,
			Shadow: true,
			Steps: []HolderStep{
				admit("x", true),
				admit("x", true), // a shadow limit's denial: the request goes on, holding nothing
				release("x", false),
				release("x", true),
				release("x", false),
			},
		},
		{
			Name:  "duplicates-end-with-their-hold",
			Limit: ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 1, Interval: time.Minute},
			Steps: []HolderStep{
				admit("x", true),
				admit("x", false),
				{Advance: time.Minute, Holder: "x", Allowed: true}, // the lease ended: a new hold
				release("x", true),
			},
		},
	}
}

// Beside is what else a HolderExample's requests meet besides its
// concurrency limit: Others entries of another policy's limit (a window
// that admits every step), each on a key value of its own, in a Cluster
// slot other than the concurrency limit's. With one, a Redis Cluster
// store decides each admission over two slots (a dry run first); with
// ratelimit.MaxCallEntries, every Redis store splits it into calls. The
// decisions are the example's alone.
type Beside struct {
	Name   string
	Others int
}

// Besides are the other limits RunHolders runs every example beside.
var Besides = []Beside{{Name: "alone"}, {Name: "beside-another-slot", Others: 1}, {Name: "over-several-calls", Others: ratelimit.MaxCallEntries}}

// RunHolders runs every HolderExample against a store built by newStore,
// each on a fresh key and a clock aligned to an hour, alone and beside
// the limits of another policy (Besides).
func RunHolders(t *testing.T, newStore func(t *testing.T, clock *Clock) ratelimit.Store) {
	for _, beside := range Besides {
		t.Run(beside.Name, func(t *testing.T) {
			for i, ex := range HolderExamples() {
				t.Run(ex.Name, func(t *testing.T) { runHolder(t, newStore, ex, i, beside) })
			}
		})
	}
}

func runHolder(t *testing.T, newStore func(t *testing.T, clock *Clock) ratelimit.Store, ex HolderExample, i int, beside Beside) {
	clock := FutureClock()
	store := newStore(t, clock)
	run := fmt.Sprint(time.Now().UnixNano())
	key := ratelimit.Key("holders", "seed", run, fmt.Sprint(i))
	others := besideKeys(key, run, beside.Others)
	window := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Hour}
	var dec ratelimit.Decision
	for n, st := range ex.Steps {
		clock.Advance(st.Advance)
		cost := max(st.Cost, 1)
		req := ratelimit.Request{Action: st.Action, Entries: []ratelimit.Entry{{Key: key, Limit: ex.Limit, Cost: cost, Holder: st.Holder, Penalty: ex.Penalty, Shadow: ex.Shadow}}}
		for _, k := range others {
			req.Entries = append(req.Entries, ratelimit.Entry{Key: k, Limit: window, Cost: 1})
		}
		if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		if dec.Allowed != st.Allowed {
			t.Fatalf("step %d (%v %s cost %d): allowed %v, want %v (%+v)", n, st.Action, st.Holder, cost, dec.Allowed, st.Allowed, dec.Results[0])
		}
	}
}

// besideKeys are n keys of another policy, each of a key value of its
// own, none in key's Cluster slot.
func besideKeys(key, run string, n int) []string {
	keys := make([]string, 0, n)
	for v := 0; len(keys) < n; v++ {
		k := ratelimit.Key("holders", "beside", fmt.Sprint(run, "-", v), "window")
		if ratelimit.HashSlot(k) != ratelimit.HashSlot(key) {
			keys = append(keys, k)
		}
	}
	return keys
}
