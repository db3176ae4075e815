package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestReservationsPurged: reservations never settled stay charged, and
// their records go once they end: the bucket keeps only the live ones
// (the next write drops the others), and it expires with the last of
// them.
func TestReservationsPurged(t *testing.T) {
	clock := ratelimittest.FutureClock()
	s := New(WithClock(clock.Now), WithSweepInterval(0))
	defer s.Close()
	key := ratelimit.Key("reserves", "purge", "tenant", "day")
	limit := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: 24 * time.Hour}
	reserve := func(holder string) ratelimit.Decision {
		t.Helper()
		req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: limit, Cost: 10, Holder: holder, Reserve: time.Minute}}}
		var dec ratelimit.Decision
		if err := s.Check(context.Background(), 0, &req, &dec); err != nil || !dec.Allowed {
			t.Fatalf("reserve %s: %v %+v", holder, err, dec)
		}
		return dec
	}
	for i := range 20 {
		reserve(fmt.Sprint("a", i))
	}
	bucket, field := ratelimit.SplitKey(key)
	held := func() int {
		sh := &s.shards[0]
		for i := range s.shards {
			if s.shards[i].m[bucket] != nil {
				sh = &s.shards[i]
			}
		}
		return len(sh.m[bucket].reservations(field))
	}
	if n := held(); n != 20 {
		t.Fatalf("%d reservations, want 20", n)
	}
	clock.Advance(time.Minute)
	dec := reserve("b")
	if r := dec.Results[0]; r.Reserved != 10 || r.Remaining != 1000-210 {
		t.Fatalf("after the first twenty ended: %+v, want 10 reserved, 210 spent (they stay charged)", r)
	}
	if n := held(); n != 1 {
		t.Fatalf("%d reservations kept, want 1 (the ended ones purged)", n)
	}
	// The window outlives the reservation: the bucket lives to the
	// window's end; a bucket holding only a reservation lives as long.
	clock.Advance(24 * time.Hour)
	if n := s.Sweep(); n != 1 {
		t.Fatalf("swept %d buckets, want 1", n)
	}
}
