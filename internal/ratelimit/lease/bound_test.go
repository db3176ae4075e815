package lease_test

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// The hot key of the bound test: one global fixed window of limit per
// second, on the clock's seconds, leased units at a time.
const (
	boundLimit = 200
	boundUnits = 10
	boundProcs = 4
	boundSpec  = `
key: global
lease: {units: 10, ttl: 1s}
limits:
- name: second
  fixedWindow: {limit: 200, window: 1s, alignment: Clock}
`
)

// TestLeasedBound: P check processes, each a Checker with its own Redis
// connections and lease store, hammer one hot global key for several
// windows against one real Redis (single, and a Cluster of 3 masters).
// Every window admits at most limit + P × units, and at least what was
// asked, up to the limit, less P × units (leasing does not starve the key). Flat out, the bucket is
// empty within milliseconds of each window's start; paced at about the
// limit, processes hold units when a window ends and spend them in the
// next, which is where the excess comes from.
func TestLeasedBound(t *testing.T) {
	srv := redistest.Start(t)
	single := func() redis.UniversalClient {
		return redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	}
	t.Run("single", func(t *testing.T) { boundRun(t, single, 0, "1s") })
	// 64 checkers each asking every 300ms: about 213 a second, just over the limit.
	t.Run("single paced", func(t *testing.T) { boundRun(t, single, 300*time.Millisecond, "1s") })
	// Leases of 100ms expire with units left, which go back within the windows.
	t.Run("single paced short leases", func(t *testing.T) { boundRun(t, single, 300*time.Millisecond, "100ms") })
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		boundRun(t, func() redis.UniversalClient {
			return redisstore.NewClient(&redis.UniversalOptions{Addrs: c.Addrs(), IsClusterMode: true})
		}, 0, "1s")
	})
}

func boundRun(t *testing.T, newClient func() redis.UniversalClient, pace time.Duration, ttl string) {
	p := policytest.Compile(t, "ns", "hot", strings.Replace(boundSpec, "ttl: 1s", "ttl: "+ttl, 1))

	// The library is loaded ahead of traffic, as the controller does: on a
	// loaded machine, compiling it on every master at the first take could
	// outlast the checks' timeout.
	loader := newClient()
	library, err := redisstore.New(loader, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := library.EnsureLoaded(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = library.Close()
	_ = loader.Close()

	// Start on a second's boundary so that the windows counted are whole.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	first := time.Now().Unix()
	const windows = 5
	stop := time.Unix(first+windows, 0)

	var mu sync.Mutex
	admitted, demand := map[int64]int{}, map[int64]int{}
	var takes, refunded, dropped int64
	var wg sync.WaitGroup
	for range boundProcs {
		client := newClient()
		rs, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ls := lease.New(rs.Backend(), lease.Options{})
		// The deadline is generous: 64 callers and a Cluster on a loaded
		// machine can keep a take waiting over a second, and what this
		// test bounds is what is admitted, not how fast.
		checker := checktest.New(t, check.Options{Backend: ls.Backend(), Timeout: 5 * time.Second}, p)
		var procWG sync.WaitGroup
		for range 16 {
			procWG.Go(func() {
				req := &policy.Request{Method: "GET", Host: "h", Path: "/", Header: http.Header{}, ClientIP: netip.MustParseAddr("192.0.2.1")}
				local, asked := map[int64]int{}, map[int64]int{}
				var out check.Outcome
				for time.Now().Before(stop) {
					if err := checker.CheckInto(t.Context(), check.Input{Namespace: "ns", Request: req}, &out); err != nil {
						t.Error(err)
						return
					}
					if out.Degraded {
						t.Errorf("Redis did not answer: %v", out.StoreErr)
						return
					}
					// Counted when the answer is known: a unit taken in
					// one window and spent in the next counts in the next.
					now := time.Now().Unix()
					asked[now]++
					if out.Allowed {
						local[now]++
					}
					if pace > 0 {
						time.Sleep(pace)
					}
				}
				mu.Lock()
				for w, n := range local {
					admitted[w] += n
				}
				for w, n := range asked {
					demand[w] += n
				}
				mu.Unlock()
			})
		}
		wg.Go(func() {
			procWG.Wait()
			running := ls.Stats() // before Close gives back what is held
			_ = ls.Close()
			mu.Lock()
			takes += running.Takes
			refunded += running.Refunded
			dropped += ls.Stats().Dropped
			mu.Unlock()
			_ = rs.Close()
			_ = client.Close()
		})
	}
	wg.Wait()

	upper := boundLimit + boundProcs*boundUnits
	total := 0
	for w := first; w < first+windows; w++ {
		n := admitted[w]
		total += n
		// Leasing starves nobody: a window admits what was asked, up to
		// the limit, less at most the units the processes hold. (Paced
		// checkers on a loaded machine may ask for less than the limit.)
		lower := min(demand[w], boundLimit) - boundProcs*boundUnits
		t.Logf("window %d: %d admitted of %d asked (limit %d, bound %d..%d)", w-first, n, demand[w], boundLimit, lower, upper)
		if n > upper {
			t.Errorf("window %d admitted %d, more than limit %d + %d processes × %d units", w-first, n, boundLimit, boundProcs, boundUnits)
		}
		if n < lower {
			t.Errorf("window %d admitted %d of %d asked, fewer than min(asked, limit %d) − %d processes × %d units", w-first, n, demand[w], boundLimit, boundProcs, boundUnits)
		}
	}
	// The point of a lease: most admissions took no store call.
	t.Logf("%d admitted with %d takes; %d units given back while running, %d dropped", total, takes, refunded, dropped)
	if ttl != "1s" && refunded == 0 {
		t.Errorf("leases of %s expired with no unit given back", ttl)
	}
	if dropped > 0 {
		t.Errorf("%d units dropped: a refund failed against a healthy Redis", dropped)
	}
	if takes > int64(total/4) {
		t.Errorf("%d takes for %d admissions: leases of %d were not used", takes, total, boundUnits)
	}
}
