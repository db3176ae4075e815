package reliability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestFlushesUnderLoad runs FUNCTION FLUSH, SCRIPT FLUSH and FLUSHALL
// under 2,000 checks a second, with the controller's table sync beside the
// check endpoint, for the library as Functions and as scripts (EVALSHA):
// no flush reaches a client (no failure-mode answer, no error), decisions
// stay exact (a FLUSHALL resets the counters it wipes, so a key value
// spanning one gets at most twice its limit), and the library and the
// policy table come back.
func TestFlushesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("2 x 10s of load with flushes")
	}
	for _, mode := range []redisstore.Mode{redisstore.ModeAuto, redisstore.ModeScripts} {
		t.Run(mode.String(), func(t *testing.T) { testFlushes(t, mode) })
	}
}

func testFlushes(t *testing.T, mode redisstore.Mode) {
	srv := redistest.Start(t)
	st := newStack(t, stackOptions{storeClient: newClient(t, srv.Addr()), controllerClient: newClient(t, srv.Addr()),
		storeOptions: redisstore.Options{Mode: mode}, policies: faultPolicies})
	warmUp(t, st, faultLoad("", 0))
	loadsBefore := st.store.Store.(*redisstore.Store).Stats().Loads
	mon := startStallMonitor(t, srv.Addr())
	ctx := context.Background()
	admin := srv.Client()

	libraryThere := func() error {
		if mode == redisstore.ModeScripts {
			// The check store's script (the controller keeps the
			// Functions library loaded besides). Nothing else loads a
			// script here but the table sync when it rewrites the table.
			info, err := srv.Info(ctx, "memory")
			if err != nil {
				return err
			}
			if info["number_of_cached_scripts"] == "0" {
				return fmt.Errorf("no script cached")
			}
			return nil
		}
		return libraryOnNode(ctx, admin)
	}

	type flush struct {
		name string
		at   time.Duration
		cmds []string
	}
	flushes := []flush{
		{name: "FUNCTION FLUSH", at: 1500 * time.Millisecond, cmds: []string{"FUNCTION FLUSH"}},
		{name: "SCRIPT FLUSH", at: 3 * time.Second, cmds: []string{"SCRIPT FLUSH"}},
		{name: "FLUSHALL", at: 4500 * time.Millisecond, cmds: []string{"FLUSHALL"}},
		{name: "all three", at: 8 * time.Second, cmds: []string{"FLUSHALL", "FUNCTION FLUSH", "SCRIPT FLUSH"}},
	}
	ld := st.startLoad(faultLoad("flush-", 15*time.Second))
	var flushAll []phase // around each FLUSHALL, for the counts
	var watchers sync.WaitGroup
	for i := range flushes {
		f := &flushes[i]
		time.Sleep(time.Until(ld.start.Add(f.at)))
		f.at = ld.since(time.Now())
		for _, c := range f.cmds {
			if err := admin.Do(ctx, splitArgs(c)...).Err(); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
		}
		wiped := ld.since(time.Now())
		if f.cmds[0] == "FLUSHALL" {
			flushAll = append(flushAll, phase{f.name, f.at, wiped})
		}
		// How long until the library and the table are back.
		watchers.Go(func() {
			from := time.Now()
			lib := waitFor(10*time.Second, libraryThere)
			table := waitFor(10*time.Second, func() error { return policiesOnNode(ctx, admin, faultPolicies) })
			t.Logf("%s at +%s: library back after %s, policy table and Functions library after %s", f.name, ms(f.at), lib(from), table(from))
		})
	}
	time.Sleep(time.Until(ld.start.Add(12 * time.Second)))
	rec := ld.stop()
	mon.end()
	watchers.Wait()
	t.Logf("load: %d checks in %s; library loads by the check store: %d", len(rec.samples), rec.duration.Round(time.Millisecond),
		st.store.Store.(*redisstore.Store).Stats().Loads-loadsBefore)
	checkAnswerTimes(t, rec, mon, []phase{{"under flushes", 0, rec.duration}})
	st.checkPoliciesInForce(t, ld)
	logStalls(t, ld, mon)

	// Nothing of a flush reaches a client: no error, no failure mode.
	counts, _ := st.store.errs.snapshot()
	for _, kind := range []string{"NOSCRIPT", "Function not found"} {
		if counts[kind] > 0 {
			t.Errorf("%d checks got %s from the store", counts[kind], kind)
		}
	}
	excluded := environmentalErrors(t, st, mon, ld)
	t.Logf("store errors by kind: %s; failure-mode answers: %v", &st.store.errs, st.failureModeAnswers())
	for ns, byStatus := range rec.statusCounts() {
		t.Logf("answers, %s: %v", ns, byStatus)
		for status, n := range byStatus {
			if status != http.StatusOK && status != http.StatusTooManyRequests {
				t.Errorf("%s: %d answers with status %d", ns, n, status)
			}
		}
	}

	exact, spanning := 0, 0
	for _, tl := range rec.tallies() {
		if !tl.complete(faultGroup) || overlapsAny(tl, excluded) {
			continue
		}
		if tl.failOpen+tl.failShut+tl.errors > 0 {
			t.Errorf("%s: answered without Redis under a flush", tl)
			continue
		}
		if overlapsAny(tl, flushAll) {
			spanning++
			if tl.admitted < faultLimit || tl.admitted > 2*faultLimit {
				t.Errorf("%s: spans a FLUSHALL, want %d to %d admitted", tl, faultLimit, 2*faultLimit)
			}
			continue
		}
		exact++
		if tl.admitted != faultLimit || tl.denied != faultGroup-faultLimit {
			t.Errorf("%s: want exactly %d admitted", tl, faultLimit)
		}
	}
	t.Logf("decisions: %d key values exact (%d admitted, %d denied each); %d spanning a FLUSHALL within %d..%d admitted",
		exact, faultLimit, faultGroup-faultLimit, spanning, faultLimit, 2*faultLimit)
	if err := policiesOnNode(ctx, admin, faultPolicies); err != nil {
		t.Errorf("after the load: %v", err)
	}
}

func overlapsAny(tl *tally, phases []phase) bool {
	for _, p := range phases {
		if tl.first < p.to && tl.last > p.from {
			return true
		}
	}
	return false
}

// waitFor polls cond for up to timeout and returns a function that says,
// relative to a start, when it held (or that it never did).
func waitFor(timeout time.Duration, cond func() error) func(from time.Time) string {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			at := time.Now()
			return func(from time.Time) string { return ms(at.Sub(from)) }
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func(time.Time) string { return fmt.Sprintf("NEVER within %s (%v)", timeout, err) }
}

func splitArgs(cmd string) []any {
	var out []any
	for _, f := range strings.Fields(cmd) {
		out = append(out, f)
	}
	return out
}

// TestPartlyRestoredTableKeepsEveryPolicy holds the check process's table
// reader to what it promises after the table vanished (FLUSHALL, a
// failover to an empty replica): it keeps enforcing every policy until the
// table is back, and never sees it back in part. A single policy's write
// into the lost table (a reconcile racing the restore) is refused; the
// controller's sync writes the whole table in one step.
func TestPartlyRestoredTableKeepsEveryPolicy(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(t, srv.Addr())
	table := policytable.New(client)
	entries := make([]*policytable.Entry, len(faultPolicies))
	for i, p := range faultPolicies {
		entries[i] = &policytable.Entry{Namespace: p.namespace, Name: p.name, Generation: 1, Spec: p.parse(t)}
	}
	if _, _, err := table.Replace(ctx, entries, nil); err != nil {
		t.Fatal(err)
	}
	reader := policytable.NewReader(table, quiet)
	done := make(chan struct{})
	go func() { following(client, reader, quiet).Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	holdsAll := func(when string) {
		t.Helper()
		set := reader.Policies()
		for _, e := range entries {
			if set.Get(e.Namespace, e.Name) == nil {
				t.Errorf("%s: the reader holds revision %d without %s: that policy is not enforced", when, set.Revision, e.ID())
			}
		}
	}
	waitUntil(t, 5*time.Second, "reader loads the table", func() error {
		if n := len(reader.Policies().All()); n != len(entries) {
			return fmt.Errorf("%d policies", n)
		}
		return nil
	})

	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A reconcile's single write would make a table of one policy: refused.
	if _, _, err := table.Put(ctx, entries[0]); !errors.Is(err, policytable.ErrTableMissing) {
		t.Fatalf("a single write into the lost table: %v, want ErrTableMissing", err)
	}
	time.Sleep(1500 * time.Millisecond) // the reader's change message and polls
	holdsAll("after FLUSHALL")

	// The controller's sync writes it back whole.
	rev, _, err := table.Replace(ctx, entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "reader follows the restore", func() error {
		if got := reader.Policies().Revision; got != rev {
			return fmt.Errorf("revision %d, want %d", got, rev)
		}
		return nil
	})
	holdsAll("after the restore")
}
