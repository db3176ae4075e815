package ratelimittest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// NoRefillLimits returns one limit per algorithm with the given capacity
// that gives nothing back within a test's lifetime on the real clock,
// indexed by algorithm-1.
func NoRefillLimits(capacity int64) []ratelimit.Limit {
	long := 24 * time.Hour
	return []ratelimit.Limit{
		{Algorithm: ratelimit.TokenBucket, Capacity: capacity, Rate: 1, Interval: long},
		{Algorithm: ratelimit.FixedWindow, Capacity: capacity, Interval: long},
		{Algorithm: ratelimit.SlidingWindowLog, Capacity: capacity, Interval: long},
		// Epoch-aligned windows: one of ten years is not crossed during a test.
		{Algorithm: ratelimit.SlidingWindowCounter, Capacity: capacity, Interval: ratelimit.MaxInterval},
		{Algorithm: ratelimit.LeakyBucket, Capacity: capacity, Rate: 1, Interval: long},
		{Algorithm: ratelimit.GCRA, Capacity: capacity, Rate: 1, Interval: long},
		{Algorithm: ratelimit.FixedWindowClock, Capacity: capacity, Interval: ratelimit.MaxInterval},
		// A year ends only on 1 January.
		ratelimit.CalendarLimit(capacity, ratelimit.Year, time.UTC),
		{Algorithm: ratelimit.Concurrency, Capacity: capacity, Interval: long},
	}
}

// NoRefillLimitOf is alg's limit of NoRefillLimits(capacity).
func NoRefillLimitOf(capacity int64, alg ratelimit.Algorithm) ratelimit.Limit {
	for _, l := range NoRefillLimits(capacity) {
		if l.Algorithm == alg {
			return l
		}
	}
	panic(fmt.Sprintf("no limit of %s", alg))
}

// AdmitConcurrently sends workers×each single-entry requests of cost 1 for
// key from workers goroutines and returns how many were admitted. Each
// request has a holder of its own (a concurrency limit's requests in
// flight, none released).
func AdmitConcurrently(t testing.TB, s ratelimit.Store, key string, l ratelimit.Limit, workers, each int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var dec ratelimit.Decision
			req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: l, Cost: 1}}}
			for n := range each {
				req.Entries[0].Holder = fmt.Sprintf("%d/%d", w, n)
				if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
					errs <- err
					return
				}
				if dec.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// CheckAtomicPairs sends 1,000 two-entry requests from 20 goroutines, half
// of them naming the keys in the opposite order: a (capacity 100) and b
// (capacity 150), both without refill. Exactly 100 must be admitted, and b
// must have lost exactly 100 units: a denied request consumed nothing, and
// lock ordering did not deadlock.
func CheckAtomicPairs(t testing.TB, s ratelimit.Store, prefix string) {
	t.Helper()
	a := ratelimit.Entry{Key: ratelimit.Key("pairs", prefix, "x", "a"), Limit: NoRefillLimits(100)[1], Cost: 1}
	b := ratelimit.Entry{Key: ratelimit.Key("pairs", prefix, "x", "b"), Limit: NoRefillLimits(150)[0], Cost: 1}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for g := range 20 {
		wg.Go(func() {
			req := ratelimit.Request{Entries: []ratelimit.Entry{a, b}}
			if g%2 == 1 {
				req.Entries[0], req.Entries[1] = b, a
			}
			var dec ratelimit.Decision
			for range 50 {
				if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
					errs <- err
					return
				}
				if dec.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	peek := ratelimit.Request{Entries: []ratelimit.Entry{b}, Action: ratelimit.DryRun}
	peek.Entries[0].Cost = 0
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, &peek, &dec); err != nil {
		t.Fatal(err)
	}
	if admitted.Load() != 100 || dec.Results[0].Remaining != 50 {
		t.Fatalf("admitted %d (want 100), b has %d left (want 50)", admitted.Load(), dec.Results[0].Remaining)
	}
}
