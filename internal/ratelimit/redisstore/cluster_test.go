package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestCluster runs the store on a Redis Cluster of 3 masters: the limits
// of one key value share a slot and go in one call (no CROSSSLOT), key
// values spread over the masters, requests spanning slots take the
// dry-run-then-consume path, decisions still equal the model's, and a
// library flushed on every master is reloaded on every master.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	clock := ratelimittest.FutureClock()
	client := newClient(t, cl.Addrs()...)
	if _, ok := client.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient with 3 addresses made a %T", client)
	}
	s := storeOver(t, client, simOpts(clock, redisstore.ModeFunctions))
	ctx := context.Background()
	tb := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Minute}
	fw := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Minute}
	log := ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 5, Interval: time.Minute}
	entries := func(value string) []ratelimit.Entry {
		return []ratelimit.Entry{
			{Key: ratelimit.Key("ns", "p", value, "burst"), Limit: tb, Cost: 1},
			{Key: ratelimit.Key("ns", "p", value, "log"), Limit: log, Cost: 1},
		}
	}

	if err := s.EnsureLoaded(ctx); err != nil {
		t.Fatal(err)
	}
	t.Run("one slot, one call", func(t *testing.T) {
		before := s.Stats().Calls
		dec := check(t, s, ratelimit.Request{Entries: entries("single")})
		if !dec.Allowed || dec.Results[0].Remaining != 9 || dec.Results[1].Remaining != 4 {
			t.Fatalf("%+v", dec)
		}
		if n := s.Stats().Calls - before; n != 1 {
			t.Fatalf("%d calls for one slot", n)
		}
	})

	t.Run("keys spread over masters", func(t *testing.T) {
		for i := range 60 {
			check(t, s, ratelimit.Request{Entries: entries(fmt.Sprint("spread-", i))})
		}
		for _, n := range cl.Nodes {
			size := n.Client().DBSize(ctx).Val()
			if size == 0 {
				t.Fatalf("master %s holds no keys", n.Addr())
			}
			t.Logf("master %s: %d keys", n.Addr(), size)
		}
		for i := range 20 {
			key := ratelimit.Key("ns", "p", fmt.Sprint("spread-", i), "burst")
			bucket, _ := ratelimit.SplitKey(key)
			for _, k := range []string{key, bucket} {
				if got := client.ClusterKeySlot(ctx, k).Val(); got != int64(ratelimit.HashSlot(key)) {
					t.Fatalf("CLUSTER KEYSLOT %s = %d, HashSlot(%s) = %d", k, got, key, ratelimit.HashSlot(key))
				}
			}
		}
	})

	t.Run("several slots: dry run, then consume", func(t *testing.T) {
		x := entries("x")
		y := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "y", "once"), Limit: fw, Cost: 1}
		if ratelimit.HashSlot(x[0].Key) == ratelimit.HashSlot(y.Key) {
			t.Fatal("test keys share a slot")
		}
		before := s.Stats().Calls
		dec := check(t, s, ratelimit.Request{Entries: append(slices.Clone(x), y)})
		if !dec.Allowed || dec.Results[0].Remaining != 9 || dec.Results[2].Remaining != 0 {
			t.Fatalf("first request: %+v", dec)
		}
		if n := s.Stats().Calls - before; n != 4 {
			t.Fatalf("allowed 2-slot request made %d calls, want 2 dry + 2 consuming", n)
		}
		bucketX, _ := ratelimit.SplitKey(x[0].Key)
		stateX := client.Dump(ctx, bucketX).Val()

		before = s.Stats().Calls
		dec = check(t, s, ratelimit.Request{Entries: append(slices.Clone(x), y)})
		if dec.Allowed || !dec.Results[0].Allowed || dec.Results[0].Remaining != 9 || dec.Results[2].Allowed {
			t.Fatalf("second request: %+v", dec)
		}
		if n := s.Stats().Calls - before; n != 2 {
			t.Fatalf("denied 2-slot request made %d calls, want 2 dry runs", n)
		}
		if got := client.Dump(ctx, bucketX).Val(); got != stateX {
			t.Fatal("a denied multi-slot request changed another slot's state")
		}
	})

	t.Run("differential", func(t *testing.T) {
		ref := ratelimittest.NewReference(clock)
		cfg := ratelimittest.DiffConfig{Requests: 800, Algorithms: ratelimit.Algorithms, Keys: 12, MaxEntries: 6}
		st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(3, ratelimittest.Seed(t, 3))), cfg, ref, ratelimittest.Target{Name: "cluster", Store: s})
		t.Log(st)
	})

	t.Run("differential with reservations", func(t *testing.T) {
		// A request over several slots reserves as one call does: a
		// duplicate the dry run denies is counted by the real round, and
		// a settlement settles in every slot.
		ref := ratelimittest.NewReference(clock)
		cfg := ratelimittest.DiffConfig{Requests: 1500, Algorithms: ratelimit.Algorithms, Keys: 12, MaxEntries: 6, Penalties: true, Reserves: true}
		st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(4, ratelimittest.Seed(t, 4))), cfg, ref, ratelimittest.Target{Name: "cluster", Store: s})
		t.Log(st)
		if st.Reserving == 0 || st.Settled == 0 {
			t.Fatalf("the timeline made %d reservations and settled %d: want both", st.Reserving, st.Settled)
		}
	})

	t.Run("concurrent requests merged per slot", func(t *testing.T) {
		// Many callers on few key values over one flusher: requests of one
		// slot share commands, requests of other slots never do (that would
		// be CROSSSLOT), and admission stays exact per key value.
		m := storeOver(t, client, redisstore.Options{Flushers: 1})
		once := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 50, Interval: time.Hour}
		big := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 1000, Rate: 1, Interval: time.Hour}
		values := []string{"m-a", "m-b", "m-c", "m-d"}
		var admitted [4]atomic.Int64
		var wg sync.WaitGroup
		before := m.Stats()
		for w := range 48 {
			wg.Go(func() {
				var dec ratelimit.Decision
				for i := range 25 {
					v := (w + i) % len(values)
					req := ratelimit.Request{Entries: []ratelimit.Entry{
						{Key: ratelimit.Key("ns", "merged", values[v], "once"), Limit: once, Cost: 1},
						{Key: ratelimit.Key("ns", "merged", values[v], "big"), Limit: big, Cost: 1},
					}}
					if err := m.Check(ctx, 0, &req, &dec); err != nil {
						t.Error(err)
						return
					}
					if dec.Allowed {
						admitted[v].Add(1)
					}
				}
			})
		}
		wg.Wait()
		st := m.Stats()
		calls, cmds := st.Calls-before.Calls, st.Commands-before.Commands
		t.Logf("%d calls in %d commands, %d pipelines", calls, cmds, st.Pipelines-before.Pipelines)
		for v, value := range values {
			peek := ratelimit.Request{Action: ratelimit.DryRun, Entries: []ratelimit.Entry{{Key: ratelimit.Key("ns", "merged", value, "big"), Limit: big}}}
			left := check(t, m, peek).Results[0].Remaining
			if admitted[v].Load() != 50 || left != 950 {
				t.Fatalf("%s: admitted %d (want 50), big bucket has %d left (want 950)", value, admitted[v].Load(), left)
			}
		}
		if calls != 48*25 || cmds >= calls {
			t.Fatalf("%d calls in %d commands: none merged", calls, cmds)
		}
	})

	t.Run("EnsureLoaded on the master that lacks it", func(t *testing.T) {
		if err := cl.Nodes[1].Client().FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		loads := s.Stats().Loads
		if err := s.EnsureLoaded(ctx); err != nil || s.Stats().Loads != loads+1 {
			t.Fatalf("EnsureLoaded: %v, %d loads", err, s.Stats().Loads-loads)
		}
		for _, n := range cl.Nodes {
			if libs := n.Client().FunctionList(ctx, redis.FunctionListQuery{}).Val(); len(libs) != 1 {
				t.Fatalf("master %s has libraries %v", n.Addr(), libs)
			}
		}
	})

	t.Run("reload on every master", func(t *testing.T) {
		for _, n := range cl.Nodes {
			if err := n.Client().FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		loads := s.Stats().Loads
		for i := range 30 { // reach every master
			check(t, s, ratelimit.Request{Entries: entries(fmt.Sprint("reload-", i))})
		}
		if n := s.Stats().Loads - loads; n != 1 {
			t.Fatalf("%d loads after one flush, want 1 (on every master at once)", n)
		}
		for _, n := range cl.Nodes {
			libs := n.Client().FunctionList(ctx, redis.FunctionListQuery{}).Val()
			if len(libs) != 1 || !strings.HasPrefix(libs[0].Name, redisstore.LibraryName) {
				t.Fatalf("master %s has libraries %v", n.Addr(), libs)
			}
		}
	})
}
