package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// window is a fixed window of 2 per second: the state of a key used once
// lives one second.
var window = ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 2, Interval: time.Second}

func one(key string, cost int64) *ratelimit.Request {
	return &ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: window, Cost: cost}}}
}

// capped is a store of at most maxKeys buckets on a simulated clock, with
// no sweeper.
func capped(t *testing.T, maxKeys int) (*memstore.Store, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.FutureClock()
	clock.AlignTo(time.Second)
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0), memstore.WithMaxKeys(maxKeys))
	t.Cleanup(func() { _ = s.Close() })
	return s, clock
}

// expect checks req and fails t unless it is decided allowed (or not)
// with remaining left on its first entry.
func expect(t *testing.T, s *memstore.Store, what string, req *ratelimit.Request, allowed bool, remaining int64) {
	t.Helper()
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, req, &dec); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if dec.Allowed != allowed || dec.Results[0].Remaining != remaining {
		t.Fatalf("%s: allowed %v with %d left, want %v with %d", what, dec.Allowed, dec.Results[0].Remaining, allowed, remaining)
	}
}

// TestMaxKeysEvictsLeastRecentlyUsed: a full store takes a new key by
// evicting the bucket used least recently, which starts afresh when it
// comes back; a bucket in use, denied requests included, survives.
func TestMaxKeysEvictsLeastRecentlyUsed(t *testing.T) {
	const maxKeys = 10
	s, _ := capped(t, maxKeys)
	for i := range maxKeys {
		expect(t, s, fmt.Sprint("k", i, " first use"), one(fmt.Sprint("k", i), 1), true, 1)
	}
	// k0, the oldest, is used again: allowed to 0, then denied. A denial
	// is a use too: a client denied again and again keeps its bucket.
	expect(t, s, "k0 second use", one("k0", 1), true, 0)
	expect(t, s, "k0 third use", one("k0", 1), false, 0)

	// Nine new keys evict k1..k9, the least recently used, in order.
	for i := range maxKeys - 1 {
		expect(t, s, fmt.Sprint("new key n", i), one(fmt.Sprint("n", i), 1), true, 1)
		if got, want := s.Evictions(), uint64(i+1); got != want {
			t.Fatalf("after new key n%d: %d evictions, want %d", i, got, want)
		}
		if s.Len() != maxKeys {
			t.Fatalf("after new key n%d: %d keys held, want %d", i, s.Len(), maxKeys)
		}
	}
	expect(t, s, "k0 after nine new keys", one("k0", 1), false, 0)
	// k1 was evicted: it starts afresh (1 left after this use, not 0),
	// and takes the room of n0, now the least recently used.
	expect(t, s, "k1 after its eviction", one("k1", 1), true, 1)
	expect(t, s, "n1, held", one("n1", 1), true, 0)
	expect(t, s, "n0, evicted by k1", one("n0", 1), true, 1)
	if s.Evictions() != maxKeys+1 || s.Len() != maxKeys {
		t.Fatalf("%d evictions, %d keys held; want %d, %d", s.Evictions(), s.Len(), maxKeys+1, maxKeys)
	}
}

// TestMaxKeysKeepsTheCallsBuckets: a call never evicts a bucket it uses,
// even the least recently used one, and one that needs more buckets than
// the store may hold is refused (ErrCapacity) having changed nothing.
func TestMaxKeysKeepsTheCallsBuckets(t *testing.T) {
	s, _ := capped(t, 2)
	expect(t, s, "a", one("a", 1), true, 1)
	expect(t, s, "b", one("b", 1), true, 1)
	// a is the least recently used; this call uses it and a new key c.
	both := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: "a", Limit: window, Cost: 1}, {Key: "c", Limit: window, Cost: 1}}}
	expect(t, s, "a with a new key", both, true, 0)
	expect(t, s, "a afterwards", one("a", 1), false, 0)
	expect(t, s, "c afterwards", one("c", 1), true, 0)
	if s.Evictions() != 1 {
		t.Fatalf("%d evictions, want 1 (b)", s.Evictions())
	}

	var dec ratelimit.Decision
	three := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: "a", Limit: window}, {Key: "d", Limit: window, Cost: 1}, {Key: "e", Limit: window, Cost: 1}}}
	if err := s.Check(context.Background(), 0, three, &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("a call of three buckets in a store of two: %v, want ErrCapacity", err)
	}
	if s.Len() != 2 || s.Evictions() != 1 {
		t.Fatalf("after the refused call: %d keys, %d evictions; want 2, 1", s.Len(), s.Evictions())
	}
	expect(t, s, "a after the refused call", one("a", 0), true, 0)
	expect(t, s, "c after the refused call", one("c", 0), true, 0)
}

// TestMaxKeysOnlyWritesTakeRoom: what writes no new bucket evicts
// nothing (a dry run, cost 0, a denial), and a bucket whose state expired
// is reclaimed, not counted as an eviction.
func TestMaxKeysOnlyWritesTakeRoom(t *testing.T) {
	s, clock := capped(t, 1)
	expect(t, s, "held", one("held", 1), true, 1)
	for name, req := range map[string]*ratelimit.Request{
		"dry run": {Entries: one("new", 1).Entries, Action: ratelimit.DryRun},
		"cost 0":  one("new", 0),
		"denied":  one("new", 3), // over the capacity: never admitted
	} {
		var dec ratelimit.Decision
		if err := s.Check(context.Background(), 0, req, &dec); err != nil {
			t.Fatalf("%s on a new key: %v", name, err)
		}
	}
	if s.Evictions() != 0 {
		t.Fatalf("%d evictions by calls that write nothing", s.Evictions())
	}
	expect(t, s, "held, still", one("held", 1), true, 0)

	clock.Advance(time.Second)
	expect(t, s, "new key once held expired", one("new", 1), true, 1)
	if s.Evictions() != 0 || s.Len() != 1 {
		t.Fatalf("%d evictions, %d keys; want an expired bucket reclaimed, not evicted", s.Evictions(), s.Len())
	}
}

// TestMaxKeysCountsBuckets: the cap counts buckets, one per (policy, key
// value), whatever the number of its limits: a full store takes a new
// limit of a bucket it holds without evicting, and evicts a whole bucket,
// every limit of it, for another.
func TestMaxKeysCountsBuckets(t *testing.T) {
	s, _ := capped(t, 2)
	limits := func(value string, cost int64, names ...string) *ratelimit.Request {
		req := &ratelimit.Request{}
		for _, l := range names {
			req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", "p", value, l), Limit: window, Cost: cost})
		}
		return req
	}
	expect(t, s, "bucket a", limits("a", 1, "x", "y", "z"), true, 1)
	expect(t, s, "bucket b", limits("b", 1, "x", "y", "z"), true, 1)
	if s.Len() != 2 {
		t.Fatalf("two buckets of three limits held as %d", s.Len())
	}
	expect(t, s, "a new limit of bucket a", limits("a", 1, "w"), true, 1)
	if s.Evictions() != 0 {
		t.Fatalf("a new limit of a held bucket evicted %d", s.Evictions())
	}
	expect(t, s, "bucket c", limits("c", 1, "x"), true, 1)
	if s.Evictions() != 1 || s.Len() != 2 {
		t.Fatalf("%d evictions, %d buckets; want 1, 2", s.Evictions(), s.Len())
	}
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, limits("a", 0, "x", "y", "z", "w"), &dec); err != nil {
		t.Fatal(err)
	}
	for i, r := range dec.Results {
		if r.Remaining != 1 {
			t.Fatalf("bucket a's limit %d: %d left, want 1 (kept)", i, r.Remaining)
		}
	}
	expect(t, s, "bucket b, evicted whole", limits("b", 0, "x", "y", "z"), true, 2)
}

// TestMaxKeysExpiredKeyReused: an expired key the store still holds is
// used again without needing room.
func TestMaxKeysExpiredKeyReused(t *testing.T) {
	s, clock := capped(t, 1)
	expect(t, s, "a", one("a", 1), true, 1)
	clock.Advance(2 * time.Second)
	expect(t, s, "a, expired", one("a", 1), true, 1)
	if s.Evictions() != 0 {
		t.Fatalf("%d evictions", s.Evictions())
	}
}

// TestMaxKeysConcurrent: distinct keys added concurrently, over several
// shards, are all decided, and the store ends holding exactly its cap.
func TestMaxKeysConcurrent(t *testing.T) {
	const maxKeys, workers, each = 20_000, 8, 4_000
	s := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithSweepInterval(0))
	t.Cleanup(func() { _ = s.Close() })
	l := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Hour}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var dec ratelimit.Decision
			for i := range each {
				req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: fmt.Sprint(w, "/", i), Limit: l, Cost: 1}}}
				if err := s.Check(context.Background(), 0, &req, &dec); err != nil || !dec.Allowed || dec.Results[0].Remaining != 9 {
					t.Errorf("key %d/%d: %v, %+v", w, i, err, dec)
					return
				}
			}
		})
	}
	wg.Wait()
	if s.Len() != maxKeys || s.Evictions() != workers*each-maxKeys {
		t.Fatalf("held %d, evicted %d; want %d, %d", s.Len(), s.Evictions(), maxKeys, workers*each-maxKeys)
	}
}

// TestMaxKeysKeepsBans: a full store never evicts a banned bucket (that
// would lift its ban): new keys evict the others, and once every bucket
// is banned a new key gets ErrCapacity; a ban's end makes its bucket
// evictable again.
func TestMaxKeysKeepsBans(t *testing.T) {
	const maxKeys = 3
	s, clock := capped(t, maxKeys)
	penalty := ratelimit.Penalty{Denials: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour}
	banned := func(key string) *ratelimit.Request {
		return &ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: window, Cost: 3, Penalty: penalty}}}
	}
	var dec ratelimit.Decision
	check := func(req *ratelimit.Request) error { return s.Check(context.Background(), 0, req, &dec) }
	if err := check(banned("{b0}:l")); err != nil || dec.Results[0].Ban != time.Minute {
		t.Fatalf("a cost above the limit, denials 1: %v, %+v; want a 1m ban", err, dec.Results)
	}
	for i := range 2 * maxKeys {
		expect(t, s, fmt.Sprint("k", i), one(fmt.Sprint("k", i), 1), true, 1)
	}
	if err := check(banned("{b0}:l")); err != nil || !dec.Results[0].Banned {
		t.Fatalf("after new keys filled the store: %v, %+v; want b0 still banned", err, dec.Results)
	}
	for _, k := range []string{"{b1}:l", "{b2}:l"} {
		if err := check(banned(k)); err != nil || dec.Results[0].Ban == 0 {
			t.Fatalf("%s: %v, %+v; want banned", k, err, dec.Results)
		}
	}
	if err := check(one("new", 1)); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("a new key in a store of bans only: %v, want ErrCapacity", err)
	}
	clock.Advance(time.Minute)
	expect(t, s, "a new key once the bans ended", one("new", 1), true, 1)
}

// TestMaxKeysNeverEvictsHolds: a bucket holding units in flight (a
// concurrency limit's) is never evicted, which would free them before
// their release or lease timeout: a full store of such buckets refuses a
// new one (ErrCapacity); once their units are released, the buckets are
// evictable again.
func TestMaxKeysNeverEvictsHolds(t *testing.T) {
	inFlight := ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 1, Interval: time.Hour}
	hold := func(key string, action ratelimit.Action) *ratelimit.Request {
		return &ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: inFlight, Cost: 1, Holder: "r1"}}, Action: action}
	}
	s, _ := capped(t, 2)
	expect(t, s, "a holds", hold("a", ratelimit.Consume), true, 0)
	expect(t, s, "b holds", hold("b", ratelimit.Consume), true, 0)
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, one("c", 1), &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("a new bucket in a store full of holds: %v, want ErrCapacity", err)
	}
	expect(t, s, "a still holds", hold("a", ratelimit.DryRun), false, 0)
	expect(t, s, "a released", hold("a", ratelimit.Release), true, 1)
	expect(t, s, "c takes a's room", one("c", 1), true, 1)
	expect(t, s, "b still holds", hold("b", ratelimit.DryRun), false, 0)
	if s.Evictions() != 1 || s.Len() != 2 {
		t.Fatalf("%d evictions, %d keys held; want 1, 2", s.Evictions(), s.Len())
	}
}

// TestMaxKeysNeverEvictsReservations: a bucket holding a live
// reservation is never evicted, as one holding units in flight: evicted,
// its settlement would find nothing and never take an actual cost above
// the estimate. Once settled, or once its reservation ended unsettled
// (charged; the window lives on), the bucket is evictable again.
func TestMaxKeysNeverEvictsReservations(t *testing.T) {
	budget := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}
	reserve := func(key string, action ratelimit.Action, cost int64) *ratelimit.Request {
		return &ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: budget, Cost: cost, Holder: "r1", Reserve: time.Minute}}, Action: action}
	}
	s, _ := capped(t, 2)
	expect(t, s, "a reserves", reserve("a", ratelimit.Consume, 10), true, 90)
	expect(t, s, "b reserves", reserve("b", ratelimit.Consume, 10), true, 90)
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, one("c", 1), &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("a new bucket in a store full of reservations: %v, want ErrCapacity", err)
	}
	expect(t, s, "a settles above its estimate", reserve("a", ratelimit.Settle, 30), true, 70)
	expect(t, s, "c takes a's room", one("c", 1), true, 1)
	expect(t, s, "b settles", reserve("b", ratelimit.Settle, 5), true, 95)
	if s.Evictions() != 1 || s.Len() != 2 {
		t.Fatalf("%d evictions, %d keys held; want 1, 2", s.Evictions(), s.Len())
	}

	s, clock := capped(t, 2)
	expect(t, s, "x reserves", reserve("x", ratelimit.Consume, 10), true, 90)
	expect(t, s, "y reserves", reserve("y", ratelimit.Consume, 10), true, 90)
	clock.Advance(time.Minute)
	expect(t, s, "z once x's and y's reservations ended", one("z", 1), true, 1)
	kept := 0 // one of x and y was evicted (relinked in no order): the other stays charged
	for _, k := range []string{"x", "y"} {
		if err := s.Check(context.Background(), 0, &ratelimit.Request{Entries: []ratelimit.Entry{{Key: k, Limit: budget}}, Action: ratelimit.DryRun}, &dec); err != nil {
			t.Fatal(err)
		}
		kept += b2i(dec.Results[0].Remaining == 90)
	}
	if kept != 1 || s.Evictions() != 1 {
		t.Fatalf("%d of x and y kept charged, %d evictions; want 1, 1", kept, s.Evictions())
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
