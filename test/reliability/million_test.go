package reliability

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// distinctKeys is how many distinct key values go through the check path.
const distinctKeys = 1_000_000

// algorithms are the six time-based algorithms with 2s windows, one policy each,
// selected by path; every key value is checked once, so each leaves one
// bucket (one state; a log's sorted set besides) behind, which must expire.
var algorithms = []struct{ path, limit, spec string }{
	{"/tb", "tb", "tokenBucket: {capacity: 5, refillRate: 5, refillInterval: 2s}"},
	{"/fw", "fw", "fixedWindow: {limit: 5, window: 2s}"},
	{"/swl", "swl", "slidingWindowLog: {limit: 5, window: 2s}"},
	{"/swc", "swc", "slidingWindowCounter: {limit: 5, window: 2s}"},
	{"/lb", "lb", "leakyBucket: {capacity: 5, leakRate: 5, leakInterval: 2s}"},
	{"/gcra", "gcra", "gcra: {rate: 5, period: 2s, burst: 5}"},
}

func millionPolicies(t testing.TB) []*policy.Policy {
	var out []*policy.Policy
	for _, a := range algorithms {
		out = append(out, testPolicy{namespace: "m", name: a.limit, spec: fmt.Sprintf(
			"match: {paths: ['%s']}\nkey: '{header:X-Key}'\nlimits: [{name: %s, %s}]", a.path, a.limit, a.spec)}.compile(t))
	}
	return out
}

// runDistinct checks n distinct key values (value i on algorithm i%6)
// from a few workers, and hands every sample-th outcome's Redis key to
// sampled. It fails t on any check not allowed by the store (each key
// value's first request must pass).
func runDistinct(t *testing.T, checker *check.Checker, prefix string, n, sample int, sampled func(key string)) time.Duration {
	t.Helper()
	var next, bad atomic.Int64
	var firstBad atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			ctx := context.Background()
			var out check.Outcome
			req := policy.Request{Method: http.MethodGet, Host: "app.example", Header: http.Header{}}
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req.Path = algorithms[i%len(algorithms)].path
				req.Header["X-Key"] = []string{prefix + strconv.Itoa(i)}
				if err := checker.CheckInto(ctx, check.Input{Namespace: "m", Request: &req}, &out); err != nil || !out.Allowed || out.Degraded || len(out.Limits) != 1 {
					if bad.Add(1) == 1 {
						firstBad.Store(fmt.Sprintf("value %d: allowed %v degraded %v (%v) limits %d, err %v", i, out.Allowed, out.Degraded, out.StoreErr, len(out.Limits), err))
					}
					continue
				}
				if sampled != nil && i%sample == 0 {
					key, _ := ratelimit.RedisKey(out.Limits[0].Key, out.Limits[0].Limit.Limit.Algorithm) // its bucket, or a log's own key
					sampled(key)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if n := bad.Load(); n > 0 {
		t.Errorf("%d checks of a fresh key value were not allowed by the store, e.g. %s", n, firstBad.Load())
	}
	return took
}

// TestMillionKeyValuesRedis sends 1,000,000 distinct key values through
// the check path over Redis: every key Redis holds has a TTL at every
// moment (INFO keyspace: keys == expires; sampled PTTLs within the
// window), and when the TTLs have run out the keys are gone and Redis's
// used_memory is back where it started.
func TestMillionKeyValuesRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 checks through Redis")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	store, err := redisstore.New(newClient(t, srv.Addr()), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// A deadline far above the load's queueing: this test is about what
	// the keys leave behind, not about answer times.
	checker := checktest.New(t, check.Options{Backend: store.Backend(), Timeout: 2 * time.Second}, millionPolicies(t)...)
	admin := srv.Client()

	// Warm up (library, connections, Lua's first allocations), then
	// start from an empty keyspace.
	runDistinct(t, checker, "warm-", 6000, 0, nil)
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	usedMemory := func() int64 {
		info, err := srv.Info(ctx, "memory")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(info["used_memory"], 10, 64)
		return n
	}
	before := usedMemory()

	// While the load runs: every key has a TTL (keys == expires), and
	// sampled keys' PTTLs are within their algorithm's horizon.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	var mu sync.Mutex
	var pending []string
	var samples, gone, noTTL int
	var peakKeys, peakMemory int64
	maxPTTL := map[string]time.Duration{}
	watch.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			keys, expires := keyspace(t, srv)
			if keys != expires {
				t.Errorf("INFO keyspace: %d keys, only %d with a TTL", keys, expires)
			}
			peakKeys = max(peakKeys, keys)
			peakMemory = max(peakMemory, usedMemory())
			mu.Lock()
			batch := pending
			pending = nil
			mu.Unlock()
			pipe := admin.Pipeline()
			cmds := make([]interface{ Val() time.Duration }, len(batch))
			for i, k := range batch {
				cmds[i] = pipe.PTTL(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil && !strings.Contains(err.Error(), "nil") {
				t.Errorf("PTTL: %v", err)
			}
			for i, k := range batch {
				samples++
				switch d := cmds[i].Val(); {
				case d == -2: // expired and gone already
					gone++
				case d < 0:
					noTTL++
					t.Errorf("key %s has no TTL (PTTL %d)", k, d)
				default:
					limit := strings.Split(ratelimit.HashTag(k), "/")[1] // the policy, named after its limit
					maxPTTL[limit] = max(maxPTTL[limit], d)
				}
			}
		}
	})
	took := runDistinct(t, checker, "k", distinctKeys, 997, func(key string) {
		mu.Lock()
		pending = append(pending, key)
		mu.Unlock()
	})
	time.Sleep(250 * time.Millisecond) // the last samples
	close(stop)
	watch.Wait()
	stats := store.Stats()
	t.Logf("%d distinct key values in %s (%.0f checks/s; %d pipelines, %d library commands)",
		distinctKeys, took.Round(time.Millisecond), float64(distinctKeys)/took.Seconds(), stats.Pipelines, stats.Commands)
	t.Logf("TTLs: keys == expires at every sample (peak %d keys); %d sampled PTTLs: %d with a TTL, %d already expired, %d without; longest PTTL per limit %v",
		peakKeys, samples, samples-gone-noTTL, gone, noTTL, maxPTTL)
	for limit, d := range maxPTTL {
		if d > 4*time.Second+100*time.Millisecond {
			t.Errorf("limit %s: a key with PTTL %s, beyond twice its 2s window", limit, d)
		}
	}

	// After the TTLs: no key left, memory back to the start.
	emptied := waitUntil(t, 60*time.Second, "every key expires", func() error {
		if n := admin.DBSize(ctx).Val(); n > 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	const tolerance = 64 << 10
	var after int64
	settled := waitUntil(t, 30*time.Second, "used_memory returns to its start", func() error {
		if after = usedMemory(); after > before+tolerance {
			return fmt.Errorf("used_memory %d, started at %d", after, before)
		}
		return nil
	})
	t.Logf("memory: used_memory %d bytes before, peak %d (%d per live key), %d after (%+d); keyspace empty %s after the last check, memory settled %s later",
		before, peakMemory, (peakMemory-before)/max(peakKeys, 1), after, after-before, emptied.Round(time.Millisecond), settled.Round(time.Millisecond))
}

// keyspace reads db0's keys and keys with a TTL from INFO keyspace.
func keyspace(t testing.TB, srv *redistest.Server) (keys, expires int64) {
	info, err := srv.Info(context.Background(), "keyspace")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(info["db0"], ",") {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "keys":
			keys = n
		case "expires":
			expires = n
		}
	}
	return keys, expires
}

// TestMillionKeyValuesMemory sends 1,000,000 distinct key values through
// the check path over the in-memory store: once their state has expired,
// a sweep leaves it empty.
func TestMillionKeyValuesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 checks through the memory store")
	}
	store := storetest.Memory(t, nil, memstore.WithSweepInterval(0)) // sweep by hand
	checker := checktest.New(t, check.Options{Backend: store.Backend()}, millionPolicies(t)...)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	took := runDistinct(t, checker, "k", distinctKeys, 0, nil)
	full := store.Len()
	peak := heap()
	if full != distinctKeys {
		t.Errorf("the store holds %d states after %d distinct key values", full, distinctKeys)
	}
	var swept int
	waited := waitUntil(t, 10*time.Second, "every state expires and a sweep removes it", func() error {
		swept += store.Sweep()
		if n := store.Len(); n > 0 {
			return fmt.Errorf("%d states left", n)
		}
		return nil
	})
	after := heap()
	t.Logf("%d distinct key values in %s (%.0f checks/s); %d states, all swept (%d) %s after the last check",
		distinctKeys, took.Round(time.Millisecond), float64(distinctKeys)/took.Seconds(), full, swept, waited.Round(time.Millisecond))
	t.Logf("memory: Go heap %d bytes before, %d with every state (%d per state), %d after the sweep", before, peak, (int64(peak)-int64(before))/int64(full), after)
	// The sweep gives the memory back (maps are rebuilt once mostly empty):
	// within 4 MiB of the start, against ~150 MB at the peak.
	if after > before+4<<20 {
		t.Errorf("Go heap %d bytes after the sweep, %d before: the memory of expired state was not given back", after, before)
	}
}
