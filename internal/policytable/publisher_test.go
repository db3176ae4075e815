package policytable

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// loadedLibrary is a library that is always there: these tests are about
// the table.
type loadedLibrary struct{}

func (loadedLibrary) EnsureLoaded(context.Context) error { return nil }
func (loadedLibrary) Version() string                    { return "test" }

// A full sync computes its table from a list of the policies taken before
// it locks the table; a reconcile may write in between. What the
// reconcile wrote is newer than the list and stays: a policy created
// after the list is not removed, one deleted after it is not written
// back. A later sync, whose list saw both, applies its own list again.
func TestSyncKeepsWhatReconcilesWroteAfterItsMark(t *testing.T) {
	ctx := context.Background()
	_, table := newTable(t)
	p := &Publisher{Table: table, Library: loadedLibrary{}}
	for _, name := range []string{"old", "edited"} {
		if _, err := p.Apply(ctx, entry("ns", name, 1)); err != nil {
			t.Fatal(err)
		}
	}

	since := p.Mark()
	// The list the sync took at its mark: old and edited (limit 1).
	listed := map[string]*Entry{"ns/old": entry("ns", "old", 1), "ns/edited": entry("ns", "edited", 1)}
	// Reconciles after the mark: created, edited to 2, old deleted.
	if _, err := p.Apply(ctx, entry("ns", "created", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(ctx, entry("ns", "edited", 2)); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, "ns", "old"); err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(ctx, since, func(map[string]Entry) map[string]*Entry { return listed })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"ns/created": 1, "ns/edited": 2}
	if got := loaded(t, table); !maps.Equal(got, want) {
		t.Fatalf("after a sync with a stale list the table holds %v, want %v", got, want)
	}
	if ids := slices.Sorted(maps.Keys(res.Table)); !slices.Equal(ids, []string{"ns/created", "ns/edited"}) {
		t.Fatalf("the sync reports the table as %v", ids)
	}

	// The next sync's list saw the reconciles; it says created is gone
	// (deleted since), and that is applied.
	since = p.Mark()
	if _, err := p.Sync(ctx, since, func(map[string]Entry) map[string]*Entry {
		return map[string]*Entry{"ns/edited": entry("ns", "edited", 2)}
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := loaded(t, table), map[string]int64{"ns/edited": 2}; !maps.Equal(got, want) {
		t.Fatalf("after a sync with a fresh list the table holds %v, want %v", got, want)
	}
}

func loaded(t *testing.T, table *Table) map[string]int64 {
	t.Helper()
	entries, _, err := table.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int64, len(entries))
	for _, e := range entries {
		got[e.ID()] = int64(e.Spec.Limits[0].FixedWindow.Limit)
	}
	return got
}

// Applies that arrive while a write is under way are written together
// next: one table write, one revision, every entry in the table.
func TestAppliesWaitingForAWriteAreWrittenTogether(t *testing.T) {
	ctx := context.Background()
	_, table := newTable(t)
	p := &Publisher{Table: table, Library: loadedLibrary{}}
	before, err := table.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}

	const n = 20
	p.mu.Lock() // a write under way
	revisions := make(chan int64, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			rev, err := p.Apply(ctx, entry("ns", fmt.Sprintf("p%02d", i), 1))
			revisions <- rev
			errs <- err
		}()
	}
	for {
		p.pendingMu.Lock()
		waiting := len(p.pending)
		p.pendingMu.Unlock()
		if waiting == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.mu.Unlock()

	var first int64
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		rev := <-revisions
		if i == 0 {
			first = rev
		}
		if rev <= before || rev != first {
			t.Fatalf("the Applies got revisions %d and %d (table at %d before): want one new revision for all", first, rev, before)
		}
	}
	if got := loaded(t, table); len(got) != n {
		t.Fatalf("the table holds %d entries, want %d", len(got), n)
	}
	if rev, _ := table.Revision(ctx); rev != first {
		t.Fatalf("the table is at revision %d after the Applies' %d: want one write", rev, first)
	}
}
