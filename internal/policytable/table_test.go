package policytable

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

func entry(ns, name string, limit int64) *Entry {
	return &Entry{Namespace: ns, Name: name, Generation: limit, Spec: ratelimitv1alpha1.RateLimitPolicySpec{
		Key: "global",
		Limits: []ratelimitv1alpha1.Limit{{Name: "l", FixedWindow: &ratelimitv1alpha1.WindowLimit{
			Limit: ratelimitv1alpha1.Count(limit), Window: "1m"}}},
	}}
}

// newTable starts Redis with an empty table, as the controller's first
// sync leaves it.
func newTable(t *testing.T) (*redistest.Server, *Table) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	table := New(client)
	if _, _, err := table.Replace(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	return srv, table
}

func TestAMissingTableIsWrittenOnlyWhole(t *testing.T) {
	ctx := context.Background()
	srv, table := newTable(t)
	for _, name := range []string{"a", "b"} {
		if _, _, err := table.Put(ctx, entry("ns", name, 1)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Client().FlushAll(ctx)
	if _, _, err := table.Put(ctx, entry("ns", "a", 1)); err != ErrTableMissing {
		t.Fatalf("put into a lost table: %v, want ErrTableMissing", err)
	}
	rev, changed, err := table.Replace(ctx, []*Entry{entry("ns", "a", 1), entry("ns", "b", 2)}, []string{"ns/gone"})
	if err != nil || !changed {
		t.Fatalf("replace: %v %v", changed, err)
	}
	entries, got, err := table.Load(ctx)
	if err != nil || got != rev || len(entries) != 2 {
		t.Fatalf("after replace: %d entries at %d (want 2 at %d), %v", len(entries), got, rev, err)
	}
	// A replace that changes nothing costs no revision; one that deletes does.
	if r, changed, _ := table.Replace(ctx, nil, nil); changed || r != rev {
		t.Fatalf("empty replace: %d %v", r, changed)
	}
	if r, changed, _ := table.Replace(ctx, nil, []string{"ns/b"}); !changed || r <= rev {
		t.Fatalf("deleting replace: %d %v", r, changed)
	}
}

// A hash evicted apart from its revision is a missing table: Load says
// so, Put is refused, Replace writes it back whole. A hash with policies
// and no marker (a controller from before the marker wrote it) loads, and
// Replace marks it without rewriting its policies.
func TestAHashWithoutItsMarker(t *testing.T) {
	ctx := context.Background()
	srv, table := newTable(t)
	rev, _, err := table.Put(ctx, entry("ns", "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := table.IDs(ctx); err != nil || len(ids) != 1 || ids[0] != "ns/a" {
		t.Fatalf("IDs: %v %v, want [ns/a] (not the marker)", ids, err)
	}
	srv.Client().Del(ctx, HashKey) // evicted; the revision stays
	if entries, got, err := table.Load(ctx); err != nil || got != 0 || len(entries) != 0 {
		t.Fatalf("load of an evicted hash: %d entries at revision %d, %v; want a missing table (none at 0)", len(entries), got, err)
	}
	if _, _, err := table.Put(ctx, entry("ns", "b", 1)); err != ErrTableMissing {
		t.Fatalf("put into an evicted hash: %v, want ErrTableMissing", err)
	}
	restored, changed, err := table.Replace(ctx, []*Entry{entry("ns", "a", 1)}, nil)
	if err != nil || !changed || restored <= rev {
		t.Fatalf("replace: revision %d (was %d), changed %v, %v", restored, rev, changed, err)
	}

	// The layout before the marker.
	srv.Client().HDel(ctx, HashKey, MarkerField)
	entries, got, err := table.Load(ctx)
	if err != nil || got != restored || len(entries) != 1 {
		t.Fatalf("load of an unmarked table: %d entries at %d, %v; want 1 at %d", len(entries), got, err, restored)
	}
	if _, _, err := table.Put(ctx, entry("ns", "b", 1)); err != ErrTableMissing {
		t.Fatalf("put into an unmarked table: %v, want ErrTableMissing until a sync marks it", err)
	}
	marked, changed, err := table.Replace(ctx, []*Entry{}, nil)
	if err != nil || !changed || marked <= restored {
		t.Fatalf("replace marking the table: revision %d, changed %v, %v", marked, changed, err)
	}
	if n, _ := srv.Client().HLen(ctx, HashKey).Result(); n != 2 {
		t.Fatalf("after marking: %d fields, want the policy and the marker", n)
	}
	if _, _, err := table.Put(ctx, entry("ns", "b", 1)); err != nil {
		t.Fatalf("put into a marked table: %v", err)
	}
}

func TestPutDeleteAndRevisions(t *testing.T) {
	ctx := context.Background()
	srv, table := newTable(t)
	r1, changed, err := table.Put(ctx, entry("ns", "a", 1))
	if err != nil || !changed || r1 <= 0 {
		t.Fatalf("first put: %d %v %v", r1, changed, err)
	}
	r2, changed, err := table.Put(ctx, entry("ns", "a", 1))
	if err != nil || changed || r2 != r1 {
		t.Fatalf("same put: revision %d (was %d) changed %v err %v; want no change", r2, r1, changed, err)
	}
	r3, changed, _ := table.Put(ctx, entry("ns", "a", 2))
	if !changed || r3 <= r1 {
		t.Fatalf("changed put: revision %d after %d", r3, r1)
	}
	e, ok, err := table.Get(ctx, "ns", "a")
	if err != nil || !ok || e.Spec.Limits[0].FixedWindow.Limit != 2 {
		t.Fatalf("get: %+v %v %v", e, ok, err)
	}
	r4, changed, _ := table.Delete(ctx, "ns", "a")
	if !changed || r4 <= r3 {
		t.Fatalf("delete: revision %d after %d", r4, r3)
	}
	if _, changed, _ := table.Delete(ctx, "ns", "a"); changed {
		t.Fatal("deleting a missing entry reported a change")
	}
	// After FLUSHALL the revision starts again above every earlier one.
	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r5, _, _ := table.Replace(ctx, []*Entry{entry("ns", "b", 1)}, nil)
	if r5 <= r4 {
		t.Fatalf("revision after FLUSHALL %d, not above %d", r5, r4)
	}
	entries, rev, err := table.Load(ctx)
	if err != nil || rev != r5 || len(entries) != 1 || entries[0].ID() != "ns/b" {
		t.Fatalf("load: %+v rev %d err %v", entries, rev, err)
	}
}

func TestReaderFollowsTheTable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, table := newTable(t)
	if _, _, err := table.Put(ctx, entry("ns", "a", 5)); err != nil {
		t.Fatal(err)
	}
	// A long poll interval: changes must arrive through pub/sub.
	r := NewReader(table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go following(table, r, time.Hour).Run(ctx)
	waitFor(t, "initial load", func() bool { return r.Loaded() && r.Policies().Get("ns", "a") != nil })

	start := time.Now()
	if _, _, err := table.Put(ctx, entry("ns", "a", 7)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "update by pub/sub", func() bool {
		p := r.Policies().Get("ns", "a")
		return p != nil && p.Limits[0].Limit.Capacity == 7
	})
	if d := time.Since(start); d > time.Second {
		t.Fatalf("update took %s, want under 1s", d)
	}
	if _, _, err := table.Delete(ctx, "ns", "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delete by pub/sub", func() bool { return r.Policies().Get("ns", "a") == nil })

	// The table vanishing (FLUSHALL) does not lift the limits in force.
	if _, _, err := table.Put(ctx, entry("ns", "kept", 3)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "put", func() bool { return r.Policies().Get("ns", "kept") != nil })
	srv.Client().FlushAll(ctx)
	srv.Client().Publish(ctx, Channel, "0") // wake the reader
	time.Sleep(200 * time.Millisecond)
	if r.Policies().Get("ns", "kept") == nil {
		t.Fatal("the reader dropped its policies when the table vanished")
	}

	// Revisions come from Redis's clock: after a failover to a server
	// whose clock is behind, the table's next revision is below the one
	// in force, and its message is still followed.
	lower := r.revision.Load() - 1_000_000
	b := `{"namespace":"ns","name":"kept","generation":2,"spec":{"key":"global","limits":[{"name":"l","fixedWindow":{"limit":4,"window":"1m"}}]}}`
	srv.Client().HSet(ctx, HashKey, "ns/kept", b, MarkerField, "1")
	srv.Client().Set(ctx, RevisionKey, lower, 0)
	srv.Client().Publish(ctx, Channel, strconv.FormatInt(lower, 10))
	waitFor(t, "a lower revision by pub/sub", func() bool {
		p := r.Policies().Get("ns", "kept")
		return p != nil && p.Limits[0].Limit.Capacity == 4
	})
}

func TestReaderPollsWhenMessagesAreLost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, table := newTable(t)
	r := NewReader(table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go following(table, r, 100*time.Millisecond).Run(ctx)
	waitFor(t, "initial load", r.Loaded)
	// Write the entry behind the table's back: no change message.
	b := `{"namespace":"ns","name":"quiet","generation":1,"spec":{"key":"global","limits":[{"name":"l","fixedWindow":{"limit":1,"window":"1m"}}]}}`
	srv.Client().HSet(ctx, HashKey, "ns/quiet", b)
	srv.Client().Set(ctx, RevisionKey, 42, 0)
	waitFor(t, "poll", func() bool { return r.Policies().Get("ns", "quiet") != nil })
}

// An outage is logged when it begins and when it ends, not at every poll:
// a missing table, then Redis away.
func TestReaderLogsAnOutageOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, table := newTable(t)
	if _, _, err := table.Put(ctx, entry("ns", "kept", 3)); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r := NewReader(table, slog.New(slog.NewTextHandler(&logs, nil)))
	go following(table, r, 20*time.Millisecond).Run(ctx)
	waitFor(t, "initial load", func() bool { return r.Policies().Get("ns", "kept") != nil })

	srv.Client().FlushAll(ctx)
	time.Sleep(300 * time.Millisecond) // about 15 polls
	if n := logs.Count("policy table missing"); n != 1 {
		t.Errorf("the missing table was logged %d times over 15 polls, want once:\n%s", n, logs.String())
	}
	if _, _, err := table.Replace(ctx, []*Entry{entry("ns", "kept", 4)}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload", func() bool { p := r.Policies().Get("ns", "kept"); return p != nil && p.Limits[0].Limit.Capacity == 4 })

	// A reader starting while Redis is away tries to load at every poll.
	srv.Stop()
	var logs2 syncbuf.Buffer
	r2 := NewReader(table, slog.New(slog.NewTextHandler(&logs2, nil)))
	go following(table, r2, 20*time.Millisecond).Run(ctx)
	waitFor(t, "the outage logged", func() bool { return logs2.Count("cannot load the policy table") > 0 })
	time.Sleep(time.Second) // a load fails after the client's retries: several of them
	if n := logs2.Count("cannot load the policy table"); n != 1 {
		t.Errorf("Redis away was logged %d times over several loads, want once:\n%s", n, logs2.String())
	}
	srv.Restart()
	waitFor(t, "load after Redis is back", r2.Loaded)
	if n := logs2.Count("policy table readable again"); n != 1 {
		t.Errorf("the end of the outage was logged %d times, want once:\n%s", n, logs2.String())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 3s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
