package check

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// A duplicate of a holder that holds must reach the store even when the
// cache of denials knows another limit of the request denies: its hold
// remembers it, so that the duplicate's release frees nothing. Answered
// from the cache, the release freed the first request's unit while it ran.
func TestDuplicateDeniedFromTheCacheIsRemembered(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	c := newChecker(t, Options{Now: clock.Now}, policytest.Compile(t, "ns", "p", `
key: global
limits:
- {name: inflight, concurrency: {limit: 1, leaseTimeout: 1h}}
- {name: minute, fixedWindow: {limit: 1, window: 1m}}
`))
	ctx := context.Background()
	admit := func(holder string) *Outcome {
		t.Helper()
		out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if !admit("x").Allowed {
		t.Fatal("x: denied")
	}
	if admit("y").Allowed { // the minute's denial is remembered
		t.Fatal("y: admitted")
	}
	if admit("x").Allowed {
		t.Fatal("x's duplicate: admitted")
	}
	out, err := c.Check(ctx, Input{Namespace: "ns", Request: request(), Holder: "x", Action: ratelimit.Release})
	if err != nil {
		t.Fatal(err)
	}
	if out.Allowed {
		t.Fatal("the duplicate's release freed x's unit")
	}
	clock.Advance(time.Minute)
	if admit("y").Allowed {
		t.Fatal("y admitted while x runs: two in flight under a limit of 1")
	}
}
