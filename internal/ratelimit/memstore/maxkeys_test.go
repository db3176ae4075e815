package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestMaxKeys: a full store admits no new key (ErrCapacity, nothing
// changed) and keeps deciding the keys it holds exactly; expired keys are
// reclaimed to make room.
func TestMaxKeys(t *testing.T) {
	const maxKeys = 10
	clock := ratelimittest.FutureClock()
	clock.AlignTo(time.Second)
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0), memstore.WithMaxKeys(maxKeys))
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	var dec ratelimit.Decision
	for i := range maxKeys {
		if err := s.Check(ctx, 0, one(fmt.Sprint("k", i), 1), &dec); err != nil || !dec.Allowed {
			t.Fatalf("key %d of %d: %v, allowed %v", i+1, maxKeys, err, dec.Allowed)
		}
	}
	err := s.Check(ctx, 0, one("new", 1), &dec)
	if !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("key %d: %v, want ErrCapacity", maxKeys+1, err)
	}
	if s.Len() != maxKeys {
		t.Fatalf("the store holds %d keys, want %d", s.Len(), maxKeys)
	}

	// The keys held are decided exactly: one more each, then denied.
	for i := range maxKeys {
		if err := s.Check(ctx, 0, one(fmt.Sprint("k", i), 1), &dec); err != nil || !dec.Allowed || dec.Results[0].Remaining != 0 {
			t.Fatalf("held key %d, second use: %v, %+v; want allowed with 0 left", i, err, dec)
		}
		if err := s.Check(ctx, 0, one(fmt.Sprint("k", i), 1), &dec); err != nil || dec.Allowed {
			t.Fatalf("held key %d, third use: %v, %+v; want denied", i, err, dec)
		}
	}

	// What needs no new key is answered: a dry run, cost 0, a denial.
	for name, req := range map[string]*ratelimit.Request{
		"dry run": {Entries: one("new", 1).Entries, DryRun: true},
		"cost 0":  one("new", 0),
		"denied":  one("new", 3), // over the capacity: never admitted
	} {
		if err := s.Check(ctx, 0, req, &dec); err != nil {
			t.Errorf("%s on a new key: %v", name, err)
		}
	}

	// All or nothing: a held key with a new one changes neither.
	both := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k0", Limit: window, Cost: 0}, {Key: "new", Limit: window, Cost: 1}}}
	if err := s.Check(ctx, 0, both, &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("held and new key: %v, want ErrCapacity", err)
	}
	if s.Len() != maxKeys {
		t.Fatalf("the store holds %d keys, want %d", s.Len(), maxKeys)
	}

	// Once the held keys expire, a new key takes the room of one of them.
	clock.Advance(time.Second)
	if err := s.Check(ctx, 0, one("new", 1), &dec); err != nil || !dec.Allowed || dec.Results[0].Remaining != 1 {
		t.Fatalf("new key after the others expired: %v, %+v", err, dec)
	}
	if s.Len() != 1 {
		t.Fatalf("the store holds %d keys after reclaiming, want 1", s.Len())
	}
	for i := range maxKeys - 1 {
		if err := s.Check(ctx, 0, one(fmt.Sprint("again", i), 1), &dec); err != nil {
			t.Fatalf("key %d after reclaiming: %v", i+2, err)
		}
	}
	if err := s.Check(ctx, 0, one("over", 1), &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("key %d after reclaiming: %v, want ErrCapacity", maxKeys+1, err)
	}
}

// TestMaxKeysCountsBuckets: the cap counts buckets, one per (policy, key
// value), whatever the number of its limits: a full store still takes a
// limit of a bucket it holds, and no limit of another.
func TestMaxKeysCountsBuckets(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0), memstore.WithMaxKeys(2))
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	three := func(value string, limits ...string) *ratelimit.Request {
		req := &ratelimit.Request{}
		for _, l := range limits {
			req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", "p", value, l), Limit: window, Cost: 1})
		}
		return req
	}
	var dec ratelimit.Decision
	for _, v := range []string{"a", "b"} {
		if err := s.Check(ctx, 0, three(v, "x", "y", "z"), &dec); err != nil || !dec.Allowed {
			t.Fatalf("bucket %s: %v, %+v", v, err, dec)
		}
	}
	if s.Len() != 2 {
		t.Fatalf("two buckets of three limits held as %d", s.Len())
	}
	if err := s.Check(ctx, 0, three("a", "w"), &dec); err != nil || !dec.Allowed {
		t.Fatalf("a new limit of a held bucket: %v, %+v", err, dec)
	}
	if err := s.Check(ctx, 0, three("c", "x"), &dec); !errors.Is(err, ratelimit.ErrCapacity) {
		t.Fatalf("a third bucket: %v, want ErrCapacity", err)
	}
	if err := s.Check(ctx, 0, three("a", "x", "y", "z", "w"), &dec); err != nil || !dec.Allowed || dec.Results[0].Remaining != 0 || dec.Results[3].Remaining != 0 {
		t.Fatalf("the held bucket's limits: %v, %+v", err, dec)
	}
}

// TestMaxKeysExpiredKeyReused: an expired key the store still holds is
// used again without needing room.
func TestMaxKeysExpiredKeyReused(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0), memstore.WithMaxKeys(1))
	t.Cleanup(func() { _ = s.Close() })
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, one("a", 1), &dec); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if err := s.Check(context.Background(), 0, one("a", 1), &dec); err != nil || !dec.Allowed || dec.Results[0].Remaining != 1 {
		t.Fatalf("expired key used again: %v, %+v", err, dec)
	}
}

// TestMaxKeysConcurrent: distinct keys added concurrently fill the store
// to exactly its cap.
func TestMaxKeysConcurrent(t *testing.T) {
	const maxKeys, workers, each = 500, 8, 200
	s := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithSweepInterval(0))
	t.Cleanup(func() { _ = s.Close() })
	l := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Hour}
	var admitted, full atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var dec ratelimit.Decision
			for i := range each {
				req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: fmt.Sprint(w, "/", i), Limit: l, Cost: 1}}}
				switch err := s.Check(context.Background(), 0, &req, &dec); {
				case err == nil && dec.Allowed:
					admitted.Add(1)
				case errors.Is(err, ratelimit.ErrCapacity):
					full.Add(1)
				default:
					t.Errorf("key %d/%d: %v, %+v", w, i, err, dec)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != maxKeys || full.Load() != workers*each-maxKeys || s.Len() != maxKeys {
		t.Fatalf("admitted %d, full %d, held %d; want %d, %d, %d", admitted.Load(), full.Load(), s.Len(), maxKeys, workers*each-maxKeys, maxKeys)
	}
}
