package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// A limit that never denies (its own mode Soft or Shadow) does not shape
// an assignment: the quota filter cannot flag a request to its upstream,
// so the Envoy's share is sized from the enforced limits alone.
func TestLimitsThatNeverDenyShapeNoAssignment(t *testing.T) {
	for _, mode := range []string{"Soft", "Shadow"} {
		t.Run(mode, func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0) // a 10 s window's start
			clock := ratelimittest.NewClock(start.Add(time.Second))
			p := startProcess(t, storetest.Memory(t, clock.Now).Backend(), rlqs.Options{Now: clock.Now}, policytest.Compile(t, "ns", "window",
				"match: {domain: edge, descriptor: [{key: name}]}\nlimits:\n"+
					"- {name: r, fixedWindow: {limit: 300, window: 10s, alignment: Clock}}\n"+
					"- {name: trial, mode: "+mode+", fixedWindow: {limit: 5, window: 10s, alignment: Clock}}"))
			s := p.open(t)
			id := map[string]string{"name": "shop"}
			if _, err := exchange(s, "edge", usage(id, 1, 0)); err != nil {
				t.Fatal(err)
			}
			setClock(clock, start.Add(6*time.Second))
			resp, err := exchange(s, "edge", usage(id, 3, 10000)) // demand far over both limits
			if err != nil {
				t.Fatal(err)
			}
			a := resp.GetBucketAction()[0]
			if got := reservedOf(a); got <= 5 {
				t.Errorf("answer %s, reserving %d: sized by the %s limit of 5, which never denies", actionOf(a), got, mode)
			}
		})
	}
}

// A token budget (charge Reserve) settles each request's own cost by its
// holder, which the quota filter never reports: it is unservable, answered
// by its failure mode as a blanket rule.
func TestTokenBudgetIsUnservable(t *testing.T) {
	p := startProcess(t, storetest.Memory(t, nil).Backend(), rlqs.Options{}, policytest.Compile(t, "ns", "budget",
		"match: {domain: edge, descriptor: [{key: tenant}, {key: id}]}\nkey: '{descriptor:tenant}'\nfailureMode: Closed\ncharge: Reserve\nreserve: {holder: id}\n"+
			"limits: [{name: month, fixedWindow: {limit: 100000, window: 1h}}]"))
	resp, err := exchange(p.open(t), "edge", usage(map[string]string{"tenant": "a", "id": "x"}, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if a := actionOf(resp.GetBucketAction()[0]); a != "deny" {
		t.Errorf("a token budget's bucket: %s, want deny (its failure mode Closed as a blanket rule)", a)
	}
	if got := metricValue(t, p, "sluice_rlqs_unservable_total"); got != 1 {
		t.Errorf("sluice_rlqs_unservable_total = %v, want 1", got)
	}
}

// A limit that never denies takes no part in the reservations, and is
// charged what each report says the Envoy let through: it counts exactly
// what was admitted, however the shares fit it.
func TestLimitsThatNeverDenyCountWhatWasAdmitted(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		limit int64
	}{{"Soft", 100}, {"Soft", 1000}, {"Shadow", 100}, {"Shadow", 1000}} {
		t.Run(fmt.Sprintf("%s %d", tc.mode, tc.limit), func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0) // a 10 s window's start
			clock := ratelimittest.NewClock(start.Add(time.Second))
			p := startProcess(t, storetest.Memory(t, clock.Now).Backend(), rlqs.Options{Now: clock.Now}, policytest.Compile(t, "ns", "window",
				"match: {domain: edge, descriptor: [{key: name}]}\nlimits:\n"+
					"- {name: r, fixedWindow: {limit: 300, window: 10s, alignment: Clock}}\n"+
					fmt.Sprintf("- {name: trial, mode: %s, fixedWindow: {limit: %d, window: 10s, alignment: Clock}}", tc.mode, tc.limit)))
			s := p.open(t)
			id := map[string]string{"name": "shop"}
			for i, n := range []uint64{1, 40, 100} { // 141 admitted in the window
				setClock(clock, start.Add(time.Duration([]int{1, 5, 8}[i])*time.Second))
				if _, err := exchange(s, "edge", usage(id, n, 0)); err != nil {
					t.Fatal(err)
				}
			}
			out, err := p.checker.Buckets().Inspect(t.Context(), "ns", "window", "name=shop")
			if err != nil {
				t.Fatal(err)
			}
			want := max(tc.limit-141, 0)
			for _, lr := range out.Limits {
				if lr.Limit.Name == "trial" && lr.Remaining != want {
					t.Errorf("trial: %d of %d left after 141 admitted, want %d", lr.Remaining, tc.limit, want)
				}
			}
		})
	}
}
