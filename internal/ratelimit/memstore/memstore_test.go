package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

func newSim(t testing.TB, clock *ratelimittest.Clock) *memstore.Store {
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDocumentedExamples(t *testing.T) {
	ratelimittest.RunExamples(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store { return newSim(t, clock) })
}

func TestHolderExamples(t *testing.T) {
	ratelimittest.RunHolders(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store { return newSim(t, clock) })
}

func TestDifferential(t *testing.T) {
	for _, alg := range ratelimit.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := ratelimittest.FutureClock()
			cfg := ratelimittest.DiffConfig{Requests: 3000, Algorithms: []ratelimit.Algorithm{alg}, Keys: 6}
			st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(uint64(alg), ratelimittest.Seed(t, 7))), cfg, ratelimittest.NewReference(clock),
				ratelimittest.Target{Name: "memstore", Store: newSim(t, clock)})
			t.Log(st)
		})
	}
	t.Run("mixed", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		cfg := ratelimittest.DiffConfig{Requests: 5000, Algorithms: ratelimit.Algorithms, Keys: 12, MaxEntries: 6}
		st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(99, ratelimittest.Seed(t, 7))), cfg, ratelimittest.NewReference(clock),
			ratelimittest.Target{Name: "memstore", Store: newSim(t, clock)})
		t.Log(st)
	})
	t.Run("reserves", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		cfg := ratelimittest.DiffConfig{Requests: 8000, Algorithms: ratelimit.Algorithms, Keys: 12, MaxEntries: 6, Penalties: true, Reserves: true}
		st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(97, ratelimittest.Seed(t, 7))), cfg, ratelimittest.NewReference(clock),
			ratelimittest.Target{Name: "memstore", Store: newSim(t, clock)})
		t.Log(st)
		if st.Reserving == 0 || st.Settled == 0 {
			t.Fatalf("the timeline made %d reservations and settled %d: want both", st.Reserving, st.Settled)
		}
	})
	t.Run("penalties", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		cfg := ratelimittest.DiffConfig{Requests: 5000, Algorithms: ratelimit.Algorithms, Keys: 12, MaxEntries: 6, Penalties: true}
		st := ratelimittest.RunDifferential(t, rand.New(rand.NewPCG(98, ratelimittest.Seed(t, 7))), cfg, ratelimittest.NewReference(clock),
			ratelimittest.Target{Name: "memstore", Store: newSim(t, clock)})
		t.Log(st)
		if st.Bans == 0 || st.Banned == 0 {
			t.Fatalf("the timeline issued %d bans and banned %d entries: want both", st.Bans, st.Banned)
		}
	})
}

// TestExactAdmission: 1,000 concurrent requests against capacity 100 with
// no refill during the test admit exactly 100, for every algorithm.
func TestExactAdmission(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	for _, l := range ratelimittest.NoRefillLimits(100) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			key := ratelimit.Key("exact", "mem", t.Name(), "l")
			if got := ratelimittest.AdmitConcurrently(t, s, key, l, 20, 50); got != 100 {
				t.Fatalf("admitted %d, want 100", got)
			}
		})
	}
}

// TestAllOrNothing: a request whose second limit denies leaves the first
// limit's state unchanged.
func TestAllOrNothing(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := newSim(t, clock)
	a := ratelimit.Entry{Key: "a", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Second}, Cost: 1}
	b := ratelimit.Entry{Key: "b", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Minute}, Cost: 1}
	var dec ratelimit.Decision
	check := func(req ratelimit.Request) {
		t.Helper()
		if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatal(err)
		}
	}
	check(ratelimit.Request{Entries: []ratelimit.Entry{b}})
	check(ratelimit.Request{Entries: []ratelimit.Entry{a, b}})
	if dec.Allowed || !dec.Results[0].Allowed || dec.Results[0].Remaining != 10 || dec.Results[1].Allowed {
		t.Fatalf("denied request reported %+v", dec)
	}
	check(ratelimit.Request{Entries: []ratelimit.Entry{a}, Action: ratelimit.DryRun})
	if dec.Results[0].Remaining != 9 || dec.Results[0].Reset != time.Second {
		t.Fatalf("first limit changed by a denied request: %+v", dec.Results[0])
	}
	// A shadow entry that denies neither blocks nor consumes.
	b.Shadow = true
	check(ratelimit.Request{Entries: []ratelimit.Entry{a, b}})
	if !dec.Allowed || dec.Results[0].Remaining != 9 || dec.Results[1].Allowed {
		t.Fatalf("shadow request: %+v", dec)
	}
}

// TestSweep: expired state is removed, live state kept.
func TestSweep(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := newSim(t, clock)
	var dec ratelimit.Decision
	for i := range 100 {
		iv := time.Second
		if i%2 == 0 {
			iv = time.Hour
		}
		req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: fmt.Sprint(i), Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: iv}, Cost: 1}}}
		if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second - time.Microsecond)
	if n := s.Sweep(); n != 0 || s.Len() != 100 {
		t.Fatalf("swept %d early, %d left", n, s.Len())
	}
	clock.Advance(time.Microsecond)
	if n := s.Sweep(); n != 50 || s.Len() != 50 {
		t.Fatalf("swept %d, %d left", n, s.Len())
	}
}

// TestBucketExpiry: a bucket lives as long as its longest-lived limit's
// state, also when a request names only its short limit, and then goes
// with all its limits.
func TestBucketExpiry(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := newSim(t, clock)
	short := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "short"), Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Second}, Cost: 1}
	long := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "long"), Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Hour}, Cost: 1}
	var dec ratelimit.Decision
	check := func(req ratelimit.Request) {
		t.Helper()
		if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatal(err)
		}
	}
	check(ratelimit.Request{Entries: []ratelimit.Entry{short, long}})
	clock.Advance(2 * time.Second)
	check(ratelimit.Request{Entries: []ratelimit.Entry{short}})
	clock.Advance(2 * time.Second)
	if n := s.Sweep(); n != 0 || s.Len() != 1 {
		t.Fatalf("swept %d buckets, %d left; want the bucket kept for its long limit", n, s.Len())
	}
	peek := long
	peek.Cost = 0
	check(ratelimit.Request{Entries: []ratelimit.Entry{peek}})
	if dec.Results[0].Remaining != 4 {
		t.Fatalf("long limit after the short one's requests: %+v", dec.Results[0])
	}
	clock.Advance(time.Hour)
	if n := s.Sweep(); n != 1 || s.Len() != 0 {
		t.Fatalf("swept %d buckets, %d left; want the bucket gone", n, s.Len())
	}
}

func TestSweeperRunsAndStops(t *testing.T) {
	s := memstore.New(memstore.WithSweepInterval(5 * time.Millisecond))
	req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Millisecond}, Cost: 1}}}
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("sweeper did not remove expired state")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // idempotent
}

func TestInvalidRequests(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Second}
	var dec ratelimit.Decision
	for name, req := range map[string]ratelimit.Request{
		"empty":     {},
		"no key":    {Entries: []ratelimit.Entry{{Limit: l, Cost: 1}}},
		"duplicate": {Entries: []ratelimit.Entry{{Key: "k", Limit: l}, {Key: "k", Limit: l}}},
		"bad limit": {Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 1}}}},
		"neg cost":  {Entries: []ratelimit.Entry{{Key: "k", Limit: l, Cost: -1}}},
		"a bucket":  {Entries: []ratelimit.Entry{{Key: "sluice:v2:{ns/p/v}", Limit: l, Cost: 1}}},
	} {
		if err := s.Check(context.Background(), 0, &req, &dec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAtomicPairs(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	ratelimittest.CheckAtomicPairs(t, s, "mem")
}

// TestCalendarWindows: the calendar's windows of 2026 at a fixed clock
// (see ratelimittest.CalendarCases).
func TestCalendarWindows(t *testing.T) {
	ratelimittest.RunCalendar(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return newSim(t, clock)
	})
}

func TestReserveExamples(t *testing.T) {
	ratelimittest.RunReserves(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store { return newSim(t, clock) })
}
