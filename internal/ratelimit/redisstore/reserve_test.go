package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestReservationsPurged: the records of reservations never settled go
// once they end (their units stay charged), their duplicates' counts with
// them, so a bucket's hash does not grow; a dry run writes nothing; the
// bucket lives as long as its last reservation.
func TestReservationsPurged(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	s := newStore(t, srv, simOpts(clock, modes[0]))
	client := srv.Client()
	ctx := context.Background()
	key := ratelimit.Key("reserves", "purge", "tenant", "day")
	bucket, _ := ratelimit.SplitKey(key)
	limit := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Hour}
	reserve := func(action ratelimit.Action, holder string, ttl time.Duration) ratelimit.Decision {
		t.Helper()
		return check(t, s, ratelimit.Request{Action: action, Entries: []ratelimit.Entry{{Key: key, Limit: limit, Cost: 10, Holder: holder, Reserve: ttl}}})
	}
	fields := func() []string {
		t.Helper()
		f, err := client.HKeys(ctx, bucket).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(f)
		return f
	}

	if dec := reserve(ratelimit.DryRun, "a0", time.Minute); !dec.Allowed || dec.Results[0].Reserved != 10 {
		t.Fatalf("dry run: %+v", dec)
	}
	if n := client.Exists(ctx, bucket).Val(); n != 0 {
		t.Fatal("a dry run wrote the bucket")
	}
	for i := range 20 {
		reserve(ratelimit.Consume, fmt.Sprint("a", i), time.Minute)
	}
	if dec := reserve(ratelimit.Consume, "a3", time.Minute); dec.Allowed {
		t.Fatalf("a duplicate admitted: %+v", dec)
	}
	if f := fields(); len(f) != 3+20+1 || !slices.Contains(f, ":dday:a3") {
		t.Fatalf("fields %q: want the limit's, ':exp', ':rday', twenty reservations and one count of duplicates", f)
	}
	end := clock.Micros() + time.Minute.Microseconds() // now, once the twenty ended
	if at := client.Do(ctx, "PEXPIRETIME", bucket).Val().(int64); at != (clock.Micros()+time.Hour.Microseconds()+999)/1000 {
		t.Fatalf("bucket expires at %dms, want the window's end", at)
	}

	clock.Advance(time.Minute)
	dec := reserve(ratelimit.Consume, "b", 2*time.Hour)
	if r := dec.Results[0]; !dec.Allowed || r.Reserved != 10 || r.Remaining != 1000-210 {
		t.Fatalf("after the first twenty ended: %+v, want 10 reserved, 210 spent (they stay charged)", r)
	}
	if f := fields(); !slices.Equal(f, []string{":exp", ":hday:b", ":rday", "day"}) {
		t.Fatalf("fields %q: want the ended reservations and their duplicates purged", f)
	}
	if at := client.Do(ctx, "PEXPIRETIME", bucket).Val().(int64); at != (end+2*time.Hour.Microseconds()+999)/1000 {
		t.Fatalf("bucket expires at %dms, want the reservation's end", at)
	}
}
