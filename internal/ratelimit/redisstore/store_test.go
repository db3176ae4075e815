package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// TestExactAdmission: 1,000 requests from 20 goroutines over 4 connections
// against capacity 100 (no refill during the test) admit exactly 100, for
// every algorithm, on the real clock (Redis TIME).
func TestExactAdmission(t *testing.T) {
	srv := redistest.Start(t)
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, PoolSize: 4, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	s := storeOver(t, c, redisstore.Options{Flushers: 4})
	for _, l := range ratelimittest.NoRefillLimits(100) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			key := ratelimit.Key("exact", "redis", l.Algorithm.String(), "l")
			if got := ratelimittest.AdmitConcurrently(t, s, key, l, 20, 50); got != 100 {
				t.Fatalf("admitted %d, want 100", got)
			}
		})
	}
	if st := c.PoolStats(); st.TotalConns > 4 {
		t.Fatalf("%d connections, want at most 4", st.TotalConns)
	}
	st := s.Stats()
	t.Logf("%d calls in %d pipelines", st.Calls, st.Pipelines)
}

// TestAllOrNothing: a request whose second limit denies leaves the first
// limit's state unchanged; a denying shadow entry neither blocks nor
// consumes.
func TestAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	s := newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	a := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "a"), Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Second}, Cost: 1}
	b := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "b"), Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 1, Interval: time.Minute}, Cost: 1}
	check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{b}})
	bucket, _ := ratelimit.SplitKey(a.Key) // b's too
	before := dump(t, srv, bucket)

	dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{a, b}})
	if dec.Allowed || !dec.Results[0].Allowed || dec.Results[0].Remaining != 10 || dec.Results[1].Allowed {
		t.Fatalf("denied request reported %+v", dec)
	}
	if after := dump(t, srv, bucket); after != before {
		t.Fatalf("the bucket changed by a denied request: %q -> %q", before, after)
	}

	b.Shadow = true
	dec = check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{a, b}})
	if !dec.Allowed || dec.Results[0].Remaining != 9 || dec.Results[1].Allowed {
		t.Fatalf("shadow request: %+v", dec)
	}
	if n := srv.Client().ZCard(context.Background(), b.Key).Val(); n != 1 {
		t.Fatalf("denying shadow entry consumed: %d log entries", n)
	}
}

// dump is the raw state of key ("" when absent).
func dump(t *testing.T, srv *redistest.Server, key string) string {
	t.Helper()
	v, err := srv.Client().Dump(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// TestKeysExpire: on the real clock, every key written has a TTL and none
// outlives it: after the longest TTL, the database is empty.
func TestKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	limits := []ratelimit.Limit{ // all back to untouched within 200ms
		{Algorithm: ratelimit.TokenBucket, Capacity: 5, Rate: 1, Interval: 40 * time.Millisecond},
		{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: 200 * time.Millisecond},
		{Algorithm: ratelimit.SlidingWindowLog, Capacity: 5, Interval: 200 * time.Millisecond},
		{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 5, Interval: 100 * time.Millisecond},
		{Algorithm: ratelimit.LeakyBucket, Capacity: 5, Rate: 1, Interval: 40 * time.Millisecond},
		{Algorithm: ratelimit.GCRA, Capacity: 5, Rate: 25, Interval: time.Second},
		{Algorithm: ratelimit.FixedWindowClock, Capacity: 5, Interval: 200 * time.Millisecond},
	}
	ctx := context.Background()
	for i := range 300 {
		var entries []ratelimit.Entry
		for j, l := range limits {
			if (i+j)%3 != 0 {
				entries = append(entries, ratelimit.Entry{Key: ratelimit.Key("ttl", "p", fmt.Sprint(i%7), l.Algorithm.String()), Limit: l, Cost: 1 + int64(i%2), Shadow: j%2 == 0})
			}
		}
		check(t, s, ratelimit.Request{Entries: entries})
	}
	keys := srv.Client().Keys(ctx, "*").Val()
	if len(keys) == 0 {
		t.Fatal("nothing written")
	}
	for _, k := range keys {
		if pttl := srv.Client().PTTL(ctx, k).Val(); pttl <= 0 || pttl > 201*time.Millisecond {
			t.Fatalf("key %s has PTTL %s", k, pttl)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for n := srv.Client().DBSize(ctx).Val(); n != 0; n = srv.Client().DBSize(ctx).Val() {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left after their TTLs", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d keys written, all gone after their TTLs", len(keys))
}

// TestAlgorithmChange: a limit holding another algorithm's state (the user
// changed a limit's algorithm) is treated as untouched, never an error,
// whatever the Redis type involved (a field of the bucket's hash, the log's
// sorted set, or something foreign at either key), for keys of Key's shape
// (a field in a bucket) and keys of their own.
func TestAlgorithmChange(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	s := newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	ref := ratelimittest.NewReference(clock)
	order := []ratelimit.Algorithm{
		ratelimit.TokenBucket, ratelimit.SlidingWindowLog, ratelimit.FixedWindow, ratelimit.FixedWindowClock, ratelimit.FixedWindow,
		ratelimit.LeakyBucket, ratelimit.GCRA, ratelimit.Concurrency, ratelimit.SlidingWindowCounter, ratelimit.FixedWindowClock, ratelimit.SlidingWindowLog,
		ratelimit.Calendar, ratelimit.FixedWindowClock, ratelimit.Concurrency, ratelimit.Calendar, ratelimit.TokenBucket,
	}
	ctx := context.Background()
	for n, key := range []string{ratelimit.Key("ns", "p", "v", "changing"), "changing"} {
		for i, alg := range order {
			l := ratelimittest.NoRefillLimitOf(7, alg)
			fresh := check(t, ref, ratelimit.Request{Entries: []ratelimit.Entry{{Key: fmt.Sprint("fresh", n, "/", i), Limit: l, Cost: 2, Holder: "h"}}})
			got := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: l, Cost: 2, Holder: "h"}}})
			if got.Results[0] != fresh.Results[0] {
				t.Fatalf("%s: %s over the previous algorithm's state: %+v, want %+v", key, alg, got.Results[0], fresh.Results[0])
			}
		}
		// Something that is not Sluice's at all, at the bucket and at the log.
		bucket, _ := ratelimit.SplitKey(key)
		for _, set := range []func(k string) error{
			func(k string) error { return srv.Client().Set(ctx, k, "junk", 0).Err() },
			func(k string) error {
				return srv.Client().HSet(ctx, k, "a", "1", "changing", "1:-5:x", ":exp", "x").Err()
			},
			func(k string) error { // a state's size, values out of range: NaN (the Key's field), -1 (a key of its own)
				return srv.Client().HSet(ctx, k, "changing", "\x01"+strings.Repeat("\xff", 16),
					"", "\x02\x00\x00\x00\x00\x00\x00\xf0\xbf"+strings.Repeat("\x00", 8)).Err()
			},
			func(k string) error { return srv.Client().ZAdd(ctx, k, redis.Z{Score: 1, Member: "bad"}).Err() },
			func(k string) error { return srv.Client().RPush(ctx, k, "x").Err() },
		} {
			for _, k := range []string{bucket, key} {
				srv.Client().Del(ctx, k)
				if err := set(k); err != nil {
					t.Fatal(err)
				}
			}
			for _, alg := range ratelimit.Algorithms {
				l := ratelimittest.NoRefillLimitOf(7, alg)
				req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: l, Cost: 1, Holder: "h"}}, Action: ratelimit.DryRun}
				if dec := check(t, s, req); !dec.Allowed || dec.Results[0].Remaining != 6 {
					t.Fatalf("%s: %s over foreign data: %+v", key, alg, dec)
				}
			}
			for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindowLog, ratelimit.TokenBucket} {
				check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: key, Limit: ratelimittest.NoRefillLimitOf(7, alg), Cost: 1, Holder: "h"}}})
				if pttl := srv.Client().PTTL(ctx, bucket).Val(); pttl <= 0 {
					t.Fatalf("%s: %s over foreign data: the bucket %s has no TTL: %s", key, alg, bucket, pttl)
				}
			}
		}
	}
}

// TestRecovery: after FLUSHALL, FUNCTION FLUSH, SCRIPT FLUSH or a server
// restart between calls, the next call succeeds without a new Store, in
// both invocation modes.
func TestRecovery(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, srv, redisstore.Options{Mode: mode})
			ctx := context.Background()
			l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}
			req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: ratelimit.Key("ns", "p", "v", "l"), Limit: l, Cost: 1}}}
			want := int64(99)
			step := func(what string, fault func()) {
				t.Helper()
				fault()
				var dec ratelimit.Decision
				if err := s.Check(ctx, 0, &req, &dec); err != nil {
					t.Fatalf("after %s: %v", what, err)
				}
				if dec.Results[0].Remaining != want {
					t.Fatalf("after %s: remaining %d, want %d", what, dec.Results[0].Remaining, want)
				}
				want--
			}
			cmd := func(args ...any) func() {
				return func() {
					if err := srv.Client().Do(ctx, args...).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			step("first call", func() {})
			loads := s.Stats().Loads
			if loads != 1 {
				t.Fatalf("first call loaded the library %d times", loads)
			}
			step("FUNCTION FLUSH", cmd("function", "flush"))
			step("SCRIPT FLUSH", cmd("script", "flush"))
			want = 99 // FLUSHALL and restarts empty the data
			step("FLUSHALL", cmd("flushall"))
			want = 99
			step("restart", srv.Restart)
			step("nothing", func() {})
			t.Logf("%s: library loaded %d times", mode, s.Stats().Loads)
		})
	}
}

// TestAutoFallback: in ModeAuto a server without FCALL/FUNCTION (renamed
// away here, as on Redis 6 or behind some proxies) is served by EVALSHA.
func TestAutoFallback(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""))
	s := newStore(t, srv, redisstore.Options{})
	req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimittest.NoRefillLimits(5)[0], Cost: 1}}}
	for i := range 3 {
		if dec := check(t, s, req); dec.Results[0].Remaining != int64(3-i+1) {
			t.Fatalf("call %d: %+v", i, dec)
		}
	}
	if s.Mode() != redisstore.ModeScripts {
		t.Fatalf("mode %s, want scripts", s.Mode())
	}
	// Forced Functions mode does not fall back: it reports the error.
	f := newStore(t, srv, redisstore.Options{Mode: redisstore.ModeFunctions})
	var dec ratelimit.Decision
	if err := f.Check(context.Background(), 0, &req, &dec); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("forced functions on a server without them: %v", err)
	}
}

// TestNoReplay: a call whose reply is lost after it ran is never sent
// again, even on a client that retries (MaxRetries 3): a proxy lets the
// command through, drops its reply and closes the connection. The control
// shows that the same client does replay an ordinary command.
func TestNoReplay(t *testing.T) {
	srv := redistest.Start(t)
	proxy := newDropProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.addr, MaxRetries: 3, PoolSize: 1, DisableIdentity: true,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s := storeOver(t, c, redisstore.Options{})
	ctx := context.Background()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 10, Interval: time.Hour}
	req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: l, Cost: 1}}}
	check(t, s, req) // loads the library; count 1

	proxy.drop.Store(true)
	var dec ratelimit.Decision
	if err := s.Check(ctx, 0, &req, &dec); err == nil {
		t.Fatal("a lost reply was not reported")
	}
	peek := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: l, Cost: 0}}, Action: ratelimit.DryRun}
	if got := check(t, s, peek).Results[0].Remaining; got != 8 {
		t.Fatalf("remaining %d after one lost call, want 8 (the call ran %d times)", got, 9-got)
	}

	proxy.drop.Store(true)
	if err := c.Incr(ctx, "control").Err(); err != nil {
		t.Fatalf("control: %v", err)
	}
	if n := srv.Client().Get(ctx, "control").Val(); n != "2" {
		t.Fatalf("control: an ordinary command ran %s times, want 2 (replayed): the test would prove nothing", n)
	}
}

// dropProxy forwards TCP to a Redis server; when drop is set, it discards
// the next reply chunk and closes that connection.
type dropProxy struct {
	addr string
	drop atomic.Bool
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := &dropProxy{addr: l.Addr().String()}
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			go p.replies(client, server)
		}
	}()
	return p
}

func (p *dropProxy) replies(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if err != nil {
			return
		}
		if p.drop.CompareAndSwap(true, false) {
			return
		}
		if _, err := client.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestBatching: concurrent calls share pipelines, and a lone call is sent
// at once.
func TestBatching(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{Flushers: 1})
	l := ratelimittest.NoRefillLimits(1000)[1]
	start := time.Now()
	check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: "lone", Limit: l, Cost: 1}}})
	t.Logf("lone call: %s", time.Since(start))
	before := s.Stats()
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Go(func() {
			for i := range 20 {
				check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: fmt.Sprint(g, "/", i), Limit: l, Cost: 1}}})
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	calls, pipes := st.Calls-before.Calls, st.Pipelines-before.Pipelines
	if calls != 1000 || pipes >= calls/2 {
		t.Fatalf("%d calls in %d pipelines: not batched", calls, pipes)
	}
	t.Logf("%d calls in %d pipelines (%.1f per pipeline)", calls, pipes, float64(calls)/float64(pipes))
}

// TestContextDeadline: a caller's deadline is respected even when Redis
// does not answer, and the store keeps working afterwards.
func TestContextDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimittest.NoRefillLimits(5)[0], Cost: 1}}}
	check(t, s, req)
	srv.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	start := time.Now()
	var dec ratelimit.Decision
	err := s.Check(ctx, 0, &req, &dec)
	cancel()
	took := time.Since(start)
	srv.Thaw()
	if err == nil || took > time.Second {
		t.Fatalf("frozen server: err %v after %s", err, took)
	}
	check(t, s, req)
}

// TestCheckTimeout: Check's timeout bounds the wait on a frozen server,
// repeatedly (the timer is reused with the pooled state), an earlier
// deadline of the context wins over it, and checks that answer in time are
// not cut short by an earlier check's timer. The socket's read deadline is
// the same instant as the wait's, so either may end it first.
func TestCheckTimeout(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	req := ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimittest.NoRefillLimits(1000)[0], Cost: 1}}}
	var dec ratelimit.Decision
	for range 50 { // warm states whose timers were set and stopped
		if err := s.Check(context.Background(), time.Second, &req, &dec); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	for i := range 3 {
		start := time.Now()
		err := s.Check(context.Background(), 30*time.Millisecond, &req, &dec)
		if took := time.Since(start); !timedOut(err) || took < 30*time.Millisecond || took > time.Second {
			t.Fatalf("frozen server, attempt %d: err %v after %s, want a timeout after 30ms", i, err, took)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	start := time.Now()
	err := s.Check(ctx, time.Minute, &req, &dec)
	cancel()
	if took := time.Since(start); !timedOut(err) || took > time.Second {
		t.Fatalf("frozen server, context deadline 30ms, timeout 1m: err %v after %s, want a timeout after 30ms", err, took)
	}
	srv.Thaw()
	for range 50 {
		if err := s.Check(context.Background(), time.Second, &req, &dec); err != nil {
			t.Fatalf("after thaw: %v", err)
		}
	}
	if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
		t.Fatalf("no timeout: %v", err)
	}
}

// timedOut: the wait's deadline or the socket's read deadline passed.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

func TestNewRejectsRing(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redisstore.New(ring, redisstore.Options{}); err == nil {
		t.Fatal("ring accepted")
	}
}

func TestAtomicPairs(t *testing.T) {
	srv := redistest.Start(t)
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, PoolSize: 4, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	ratelimittest.CheckAtomicPairs(t, storeOver(t, c, redisstore.Options{}), "redis")
}

// TestEnsureLoaded loads only where the library is missing.
func TestEnsureLoaded(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, srv, redisstore.Options{Mode: mode})
			ctx := context.Background()
			flush := "function"
			if mode == redisstore.ModeScripts {
				flush = "script"
			}
			for i, want := range []uint64{1, 1, 2} {
				if i == 2 {
					srv.Client().Do(ctx, flush, "flush")
				}
				if err := s.EnsureLoaded(ctx); err != nil {
					t.Fatal(err)
				}
				if got := s.Stats().Loads; got != want {
					t.Fatalf("step %d: %d loads, want %d", i, got, want)
				}
			}
			if err := s.Load(ctx); err != nil || s.Stats().Loads != 3 {
				t.Fatalf("Load: %v, %d loads", err, s.Stats().Loads)
			}
			check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: "k", Limit: ratelimittest.NoRefillLimits(5)[0], Cost: 1}}})
			if s.Stats().Loads != 3 {
				t.Fatal("a call after EnsureLoaded loaded again")
			}
		})
	}
}
