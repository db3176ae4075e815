package check

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// TestCheckIntoAllocs holds the hot path to its allocation budget over the
// memory store, with the Outcome reused: the rendered key value and each
// limit's Redis key, nothing else, allowed or denied.
func TestCheckIntoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		denied     bool
		allocs     float64
	}{
		{"allowed one limit", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]", false, 2},
		{"allowed three limits", "key: '{client_ip}'\nlimits: [{name: a, fixedWindow: {limit: 1000000000, window: 1h}}, {name: b, tokenBucket: {capacity: 1000000000, refillRate: 1, refillInterval: 1s}}, {name: c, gcra: {rate: 1000000000, period: 1s, burst: 1000000000}}]", false, 4},
		{"denied from the cache", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
			c := newChecker(t, Options{Now: clock.Now}, policytest.Compile(t, "ns", "p", tc.spec))
			ctx, in, out := context.Background(), Input{Namespace: "ns", Request: request()}, &Outcome{}
			check := func() {
				if err := c.CheckInto(ctx, in, out); err != nil || out.Allowed == tc.denied {
					t.Fatalf("allowed %v, err %v", out.Allowed, err)
				}
			}
			if tc.denied {
				_ = c.CheckInto(ctx, in, out) // consumes the only unit
				check()                       // denied by the store: cached
			}
			check() // warm the pools and counters
			if n := testing.AllocsPerRun(200, check); n > tc.allocs {
				t.Errorf("%v allocations per check, want at most %v", n, tc.allocs)
			}
		})
	}
}

// TestCheckOverRedisAllocs: over the Redis store, a check allocates what
// the store call itself does plus the key value and the limit's key; the
// store call's deadline costs no context and no timer.
func TestCheckOverRedisAllocs(t *testing.T) {
	srv := redistest.Start(t)
	store := storetest.Redis(t, srv.Addr())
	ctx := context.Background()
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	p := policytest.Compile(t, "ns", "p", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]")
	c := newChecker(t, Options{Backend: store.Backend(), Timeout: time.Second}, p)

	req := ratelimit.Request{Entries: p.AppendEntries(nil, "direct", 1)}
	var dec ratelimit.Decision
	direct := func() {
		if err := store.Check(ctx, time.Second, &req, &dec); err != nil || !dec.Allowed {
			t.Fatalf("allowed %v, err %v", dec.Allowed, err)
		}
	}
	in, out := Input{Namespace: "ns", Request: request()}, &Outcome{}
	checked := func() {
		if err := c.CheckInto(ctx, in, out); err != nil || !out.Allowed || out.Degraded {
			t.Fatalf("allowed %v, degraded %v, err %v", out.Allowed, out.Degraded, err)
		}
	}
	direct()
	checked()
	storeAllocs, n := testing.AllocsPerRun(200, direct), testing.AllocsPerRun(200, checked)
	t.Logf("store call %v allocations, check %v", storeAllocs, n)
	if n > storeAllocs+2 {
		t.Errorf("%v allocations per check, want at most the store call's %v + 2", n, storeAllocs)
	}
}
