package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestBucketLayout: the limits of one key value live in one hash, a field
// each, beside a sliding log's own sorted set; a request reads the bucket
// once, writes it once and moves its expiry at most once, whatever the
// number of its limits; the bucket expires with its longest-lived state,
// also when a request names only some of its limits.
func TestBucketLayout(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	s := newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	if err := s.EnsureLoaded(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := srv.Client()
	entry := func(limit string, l ratelimit.Limit) ratelimit.Entry {
		return ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", limit), Limit: l, Cost: 1}
	}
	burst := entry("burst", ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 100, Rate: 1, Interval: time.Second})
	minute := entry("minute", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Minute})
	day := entry("day", ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 1000, Interval: 24 * time.Hour})
	log := entry("log", ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 5, Interval: time.Hour})
	bucket, _ := ratelimit.SplitKey(burst.Key)
	if bucket != "sluice:v2:{ns/p/v}" {
		t.Fatalf("bucket %q", bucket)
	}

	// Three hash limits: per request one HMGET, one HSET and at most one
	// PEXPIREAT, whatever the number of limits.
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		clock.Advance(time.Millisecond)
		if dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{burst, minute, day}}); !dec.Allowed {
			t.Fatalf("denied: %+v", dec)
		}
	}
	calls := commandCalls(t, srv)
	t.Logf("%d requests of three limits ran %v", n, calls)
	if calls["hmget"] != n || calls["hset"] != n || calls["pexpireat"] > n || calls["del"] != 0 || calls["fcall"] != n {
		t.Fatalf("%d requests of three limits ran %v", n, calls)
	}
	if keys := admin.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != bucket {
		t.Fatalf("keys %v, want the bucket alone", keys)
	}
	got := admin.HGetAll(ctx, bucket).Val()
	dayEnd := (clock.Micros()/(24*time.Hour).Microseconds() + 1) * (24 * time.Hour).Microseconds()
	if len(got) != 4 {
		t.Fatalf("bucket %q", got)
	}
	for field, want := range map[string]struct {
		alg   ratelimit.Algorithm
		count int64
	}{"burst": {ratelimit.TokenBucket, 80}, "minute": {ratelimit.FixedWindow, 20}, "day": {ratelimit.FixedWindowClock, 20}} {
		if alg, vals := fieldState(t, got[field]); alg != want.alg || len(vals) != 2 || vals[0] != want.count {
			t.Errorf("field %s: %s %v, want %s with %d", field, alg, vals, want.alg, want.count)
		}
	}
	if exp := expiryField(t, got[":exp"]); exp != dayEnd/1000 {
		t.Fatalf("bucket's :exp %d, want the day's end %dms", exp, dayEnd/1000)
	}
	if at := admin.PExpireTime(ctx, bucket).Val(); at != time.Duration(dayEnd)*time.Microsecond {
		t.Fatalf("bucket expires at %s, want the day's end (%dµs), the longest state's", at, dayEnd)
	}

	// A request naming only the burst limit keeps the day's expiry.
	clock.Advance(time.Second)
	check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{burst}})
	if at := admin.PExpireTime(ctx, bucket).Val(); at != time.Duration(dayEnd)*time.Microsecond {
		t.Fatalf("after a request of the burst limit alone the bucket expires at %s, want %dµs", at, dayEnd)
	}

	// A sliding log beside them: its sorted set, its mark in the bucket.
	check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{burst, log}})
	if v := admin.HGet(ctx, bucket, "log").Val(); v != "\x03" {
		t.Fatalf("the log's field holds %q, want its mark, the byte 3", v)
	}
	if n := admin.ZCard(ctx, log.Key).Val(); n != 1 {
		t.Fatalf("the log holds %d entries", n)
	}
	if keys := admin.Keys(ctx, "*").Val(); len(keys) != 2 {
		t.Fatalf("keys %v, want the bucket and the log", keys)
	}
}

// TestMalformedCalls: a call the library rejects writes nothing.
func TestMalformedCalls(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	ctx := context.Background()
	if err := s.EnsureLoaded(ctx); err != nil {
		t.Fatal(err)
	}
	tb := "1:10:1:1000000:1:0:"
	for name, c := range map[string]struct {
		keys []string
		args []string
	}{
		"no keys":                {nil, []string{"1:0:-", tb + "a"}},
		"bad header":             {[]string{"b"}, []string{"x:0:-", tb + "a"}},
		"bad entry":              {[]string{"b"}, []string{"1:0:-", "1:10:1:1000000:1:0"}},
		"field with a colon":     {[]string{"b"}, []string{"1:0:-", tb + "a:b"}},
		"too few keys":           {[]string{"b"}, []string{"2:0:-", tb + "a", tb + "c"}},
		"too few keys for a log": {[]string{"b"}, []string{"1:0:-", "3:5:0:1000000:1:0:l"}},
		"too many keys":          {[]string{"b", "c"}, []string{"1:0:-", tb + "a"}},
		"duplicate field":        {[]string{"b", "b"}, []string{"2:0:-", tb + "a", tb + "a"}},
		"bucket split apart":     {[]string{"b", "c", "b"}, []string{"3:0:-", tb + "a", tb + "a", tb + "c"}},
		"own log in a bucket":    {[]string{"b", "b", "b"}, []string{"2:0:-", tb + "a", "3:5:0:1000000:1:0:"}},
		"log at a bucket":        {[]string{"b", "c", "c"}, []string{"2:0:-", "3:5:0:1000000:1:0:l", tb + "a"}},
		"second request bad":     {[]string{"b", "c"}, []string{"1:0:-", tb + "a", "1:0:-", "9:1:1:1:1:0:a"}},
		// A calendar quota's entry carries four window starts, in order,
		// and the time decided at must lie within them.
		"calendar as a common entry":       {[]string{"b"}, []string{"1:0:-", "8:5:0:86400000000:1:0:a"}},
		"calendar windows out of order":    {[]string{"b"}, []string{"1:0:-", "8:5:1000:3000:2000:4000:1:0:a"}},
		"calendar time before its windows": {[]string{"b"}, []string{"1:0:999", "8:5:1000:2000:3000:4000:1:0:a"}},
		"calendar time after its windows":  {[]string{"b"}, []string{"1:0:4000", "8:5:1000:2000:3000:4000:1:0:a"}},
		"calendar server clock skewed":     {[]string{"b", "c"}, []string{"1:0:-", tb + "a", "1:0:-", "8:5:1000:2000:3000:4000:1:0:a"}},
	} {
		args := []any{"FCALL", redisstore.FunctionName, len(c.keys)}
		for _, k := range c.keys {
			args = append(args, k)
		}
		for _, a := range c.args {
			args = append(args, a)
		}
		err := srv.Client().Do(ctx, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "sluice:") {
			t.Errorf("%s: %v, want the library's error", name, err)
		}
		if n := srv.Client().DBSize(ctx).Val(); n != 0 {
			t.Fatalf("%s: %d keys written", name, n)
		}
	}
}

// fieldState decodes a limit's field in its bucket: the algorithm id as a
// byte, then its values as little-endian doubles.
func fieldState(t *testing.T, v string) (ratelimit.Algorithm, []int64) {
	t.Helper()
	if len(v) < 1 || (len(v)-1)%8 != 0 {
		t.Fatalf("field %q is no state", v)
	}
	vals := make([]int64, (len(v)-1)/8)
	for i := range vals {
		vals[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[1+8*i:]))))
	}
	return ratelimit.Algorithm(v[0]), vals
}

// expiryField decodes a bucket's :exp field (ms, a little-endian double).
func expiryField(t *testing.T, v string) int64 {
	t.Helper()
	if len(v) != 8 {
		t.Fatalf(":exp %q is no expiry", v)
	}
	return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(v))))
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t *testing.T, srv *redistest.Server) map[string]int {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls[name], _ = strconv.Atoi(v)
			}
		}
	}
	return calls
}
