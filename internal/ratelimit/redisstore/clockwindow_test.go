package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestFixedWindowClockKeys: a clock-aligned window's field in its bucket
// holds its count and window start, and the bucket expires exactly at the
// window's end, the same moment for every key value whenever its first
// request came.
func TestFixedWindowClockKeys(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock() // on an hour, so on a minute
	s := newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	ctx := context.Background()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 3, Interval: time.Minute}
	a := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "a", "minute"), Limit: l, Cost: 1}
	b := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "b", "minute"), Limit: l, Cost: 1}
	start := clock.Micros()
	boundaryMs := (start + time.Minute.Microseconds()) / 1000

	clock.Advance(59500 * time.Millisecond)
	for range 3 {
		check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{a}})
	}
	dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{a}})
	if r := dec.Results[0]; dec.Allowed || r.RetryAfter != 500*time.Millisecond || r.Reset != 500*time.Millisecond || r.Remaining != 0 {
		t.Fatalf("4th request at 59.5s: %+v", dec)
	}
	clock.Advance(300 * time.Millisecond)
	check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{b}})
	bucketA, field := ratelimit.SplitKey(a.Key)
	bucketB, _ := ratelimit.SplitKey(b.Key)
	for _, k := range []string{bucketA, bucketB} {
		if at := srv.Client().PExpireTime(ctx, k).Val(); at != time.Duration(boundaryMs)*time.Millisecond {
			t.Fatalf("%s expires at %s, want the boundary %dms", k, at, boundaryMs)
		}
	}
	got := srv.Client().HGetAll(ctx, bucketA).Val()
	if alg, vals := fieldState(t, got[field]); len(got) != 2 || alg != ratelimit.FixedWindowClock || len(vals) != 2 || vals[0] != 3 || vals[1] != start ||
		expiryField(t, got[":exp"]) != boundaryMs {
		t.Fatalf("state of %s: %q", bucketA, got)
	}

	// At the boundary the count is fresh, and the key lives to the next one.
	clock.Advance(200 * time.Millisecond)
	dec = check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{a}})
	if r := dec.Results[0]; !dec.Allowed || r.Remaining != 2 || r.Reset != time.Minute {
		t.Fatalf("at the boundary: %+v", dec)
	}
	if at := srv.Client().PExpireTime(ctx, bucketA).Val(); at != time.Duration(boundaryMs)*time.Millisecond+time.Minute {
		t.Fatalf("after the boundary %s expires at %s", bucketA, at)
	}
}

// TestFixedWindowClockServerTime: without a simulated clock, windows are
// aligned on the server's TIME: a 1h window's bucket expires on the hour.
func TestFixedWindowClockServerTime(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 10, Interval: time.Hour}
	key := ratelimit.Key("ns", "p", "v", "hour")
	before := time.Now()
	dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: l, Cost: 1}}})
	after := time.Now()
	bucket, _ := ratelimit.SplitKey(key)
	at := srv.Client().PExpireTime(context.Background(), bucket).Val()
	end := time.UnixMilli(at.Milliseconds())
	if at%time.Hour != 0 || end.Before(before) || end.After(after.Add(time.Hour)) {
		t.Fatalf("key expires at %s (%s), want the next hour after %s", end.UTC(), at, before.UTC())
	}
	if r := dec.Results[0]; r.Remaining != 9 || r.Reset <= 0 || r.Reset > time.Hour || before.Add(r.Reset).After(end.Add(time.Second)) {
		t.Fatalf("result %+v, window ends %s", r, end.UTC())
	}
}

// TestFixedWindowClockEdited: a window edited while a key holds a count.
// The count belongs to the new window that contains the old one's start
// (or to none, once that window is over), as the model says.
func TestFixedWindowClockEdited(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock() // on an hour
	hourStart := clock.Micros()
	s := newStore(t, srv, simOpts(clock, redisstore.ModeScripts))
	ref := ratelimittest.NewReference(clock)
	key := ratelimit.Key("ns", "p", "v", "edited")
	minute := ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 3, Interval: time.Minute}
	hour := ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 5, Interval: time.Hour}
	both := func(l ratelimit.Limit, cost int64) ratelimit.Result {
		t.Helper()
		req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: l, Cost: cost}}}
		want, got := check(t, ref, req), check(t, s, req)
		if got.Results[0] != want.Results[0] {
			t.Fatalf("%s cost %d at +%s: lua %+v, model %+v", l, cost, time.Duration(clock.Micros()-hourStart)*time.Microsecond, got.Results[0], want.Results[0])
		}
		return got.Results[0]
	}
	clock.Advance(5 * time.Minute)
	both(minute, 3)
	clock.Advance(30 * time.Second)
	if r := both(hour, 1); !r.Allowed || r.Remaining != 1 || r.Reset != 54*time.Minute+30*time.Second {
		t.Fatalf("1m edited to 1h: %+v", r)
	}
	bucket, field := ratelimit.SplitKey(key)
	if alg, vals := fieldState(t, srv.Client().HGet(context.Background(), bucket, field).Val()); alg != ratelimit.FixedWindowClock || vals[0] != 4 || vals[1] != hourStart {
		t.Fatalf("state %s %v, want a count of 4 from the hour's start %d", alg, vals, hourStart)
	}
	clock.Advance(15 * time.Minute)
	if r := both(minute, 1); !r.Allowed || r.Remaining != 2 || r.Reset != 30*time.Second {
		t.Fatalf("1h edited back to 1m: %+v", r)
	}
}
