package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

func testPolicy(uid types.UID, generation int64, when string) ratelimitv1alpha1.RateLimitPolicy {
	return ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "api", UID: uid, Generation: generation},
		Spec: ratelimitv1alpha1.RateLimitPolicySpec{
			Key:   "global",
			Match: ratelimitv1alpha1.RequestMatch{When: when},
			Limits: []ratelimitv1alpha1.Limit{{
				Name:        "hourly",
				FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1h"},
			}},
		},
	}
}

// A generation's spec never changes, so the sync compiles it once: here a
// spec changed under the same generation (which the API server never does)
// shows that the second sync did not compile it again.
func TestTableSyncCompilesEachGenerationOnce(t *testing.T) {
	const typo = `request.hedaers["x-plan"] == "free"`
	s := &TableSync{}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 1, "")}); errs[0] != nil {
		t.Fatalf("a valid policy does not compile: %v", errs[0])
	}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 1, typo)}); errs[0] != nil {
		t.Fatalf("generation 1 was compiled again: %v", errs[0])
	}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 2, typo)}); errs[0] == nil {
		t.Fatal("generation 2, which does not compile, was not compiled")
	}
	// A policy deleted and created again under the same name has a new UID.
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u2", 2, "")}); errs[0] != nil {
		t.Fatalf("a new object was taken for the old one: %v", errs[0])
	}
	if _, ok := s.checked["u1"]; ok {
		t.Fatal("a policy no longer listed is still remembered")
	}
}

// fakeSyncer is a table in memory that a test can empty, as an eviction
// or FLUSHALL would.
type fakeSyncer struct {
	table    map[string]policytable.Entry
	revision int64
}

// Mark is always the same: nothing but the syncs writes this table.
func (f *fakeSyncer) Mark() policytable.Mark { return 0 }

func (f *fakeSyncer) Sync(_ context.Context, _ policytable.Mark, desired func(map[string]policytable.Entry) map[string]*policytable.Entry) (policytable.SyncResult, error) {
	current := maps.Clone(f.table)
	want := desired(current)
	var res policytable.SyncResult
	for id, e := range want {
		if cur, ok := f.table[id]; !ok || cur.Generation != e.Generation {
			f.table[id] = *e
			res.Written++
		}
	}
	for id := range f.table {
		if _, ok := want[id]; !ok {
			delete(f.table, id)
			res.Removed++
		}
	}
	if res.Written+res.Removed > 0 {
		f.revision++
	}
	res.Revision, res.Table = f.revision, want
	return res, nil
}

// listed is a fixed list of policies, as the manager's cache lists them.
type listed []ratelimitv1alpha1.RateLimitPolicy

func (l listed) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("not used")
}

func (l listed) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*ratelimitv1alpha1.RateLimitPolicyList).Items = slices.Clone(l)
	return nil
}

// replyError is an error reply of Redis (go-redis's redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// An allkeys-* maxmemory-policy gets one Warning event per policy (not one
// per sync), again when the setting changes, none once it is safe; a
// policy the table lost gets a Warning event naming the likely cause.
func TestTableSyncWarnsOfEviction(t *testing.T) {
	ctx := context.Background()
	a, b := testPolicy("u1", 1, ""), testPolicy("u2", 1, "")
	b.Name = "web"
	memory := []redisconn.MemoryPolicy{{Policy: "allkeys-lru", MaxMemory: 100 << 20}}
	var memErr error
	syncer := &fakeSyncer{table: map[string]policytable.Entry{}}
	rec := events.NewFakeRecorder(100)
	s := &TableSync{Client: listed{a, b}, Syncer: syncer, LastGood: NewLastGood(), Recorder: rec,
		Memory: func(context.Context) ([]redisconn.MemoryPolicy, error) { return memory, memErr }}

	sync := func(what string, wantEvents int, wantIn string) {
		t.Helper()
		if err := s.SyncOnce(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := drain(rec)
		if len(got) != wantEvents {
			t.Fatalf("%s: events %q, want %d", what, got, wantEvents)
		}
		for _, e := range got {
			if !strings.Contains(e, wantIn) {
				t.Errorf("%s: event %q does not say %q", what, e, wantIn)
			}
		}
	}
	sync("allkeys-lru", 2, "Warning EvictionRisk Redis: maxmemory-policy allkeys-lru")
	sync("the same setting at the next sync", 0, "")
	memory[0].Policy = "allkeys-random"
	sync("another allkeys policy", 2, "allkeys-random")

	// The table loses one policy: written back, with an event on it.
	delete(syncer.table, "ns/web")
	sync("a lost policy", 1, "Warning PolicyTableRestored The policy table in Redis had lost this policy (probably evicted: Redis: maxmemory-policy allkeys-random")
	if _, ok := syncer.table["ns/web"]; !ok {
		t.Fatal("the lost policy was not written back")
	}

	memory[0].Policy = "volatile-ttl"
	sync("volatile-ttl", 0, "")
	memory = []redisconn.MemoryPolicy{{Policy: "allkeys-lru"}}
	sync("allkeys-lru without maxmemory", 0, "")

	// The whole table lost (FLUSHALL): every policy written back.
	syncer.table = map[string]policytable.Entry{}
	sync("the table lost", 2, "(evicted, flushed, or lost in a failover to an empty replica)")

	// INFO refused: nothing known, no event; the sync goes on.
	memErr = replyError("NOPERM User sluice-controller has no permissions to run the 'info' command")
	sync("INFO refused", 0, "")
	if s.memoryErr == "" || !strings.Contains(s.memoryErr, "grant it +info|memory") {
		t.Errorf("INFO refused: remembered %q, want the advice to grant +info|memory", s.memoryErr)
	}
}
