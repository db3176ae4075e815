package policytable

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/fleet"
)

// TestReaderCompilesOnlyWhatChanged: a change recompiles the changed
// policy and keeps the others' compiled policies; a field that stops
// compiling keeps its last good version in force, reload after reload,
// with its problem reported.
func TestReaderCompilesOnlyWhatChanged(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, table := newTable(t)
	for _, name := range []string{"a", "b"} {
		if _, _, err := table.Put(ctx, entry("ns", name, 5)); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go following(table, r, 50*time.Millisecond).Run(ctx)
	waitFor(t, "initial load", func() bool { return r.Policies().Get("ns", "b") != nil })
	a, b := r.Policies().Get("ns", "a"), r.Policies().Get("ns", "b")

	if _, _, err := table.Put(ctx, entry("ns", "a", 7)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change", func() bool { return r.Policies().Get("ns", "a").Limits[0].Limit.Capacity == 7 })
	if r.Policies().Get("ns", "a") == a || r.Policies().Get("ns", "b") != b {
		t.Fatal("want a recompiled and b's compiled policy kept")
	}

	// A field this version cannot compile (a policy without limits).
	srv.Client().HSet(ctx, HashKey, "ns/b", `{"namespace":"ns","name":"b","generation":9,"spec":{"key":"global"}}`)
	for rev := int64(1); rev <= 2; rev++ {
		srv.Client().Incr(ctx, RevisionKey)
		revision, err := table.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reload", func() bool { return r.Policies().Revision == revision })
		if r.Policies().Get("ns", "b") != b || r.Problems()["ns/b"] == "" {
			t.Fatalf("reload %d: b %v, problems %v; want b's last good version kept and its problem reported", rev, r.Policies().Get("ns", "b"), r.Problems())
		}
	}
}

// following is a fleet.Follower that keeps r current, polling every poll,
// as a check process's does.
func following(table *Table, r *Reader, poll time.Duration) *fleet.Follower {
	f := fleet.NewFollower(table.client, poll, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Follow(Channel, r)
	return f
}
