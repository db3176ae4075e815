package check

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// TestStoreFull: a check that needs a new key while the store is full is
// answered by its policy's failure mode and counted, the keys the store
// holds are still decided exactly, and the breaker stays closed, however
// many such checks come.
func TestStoreFull(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	store := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0), memstore.WithMaxKeys(3))
	defer store.Close()
	reg := prometheus.NewRegistry()
	c := New(Options{Store: store, Now: clock.Now, Metrics: NewMetrics(reg), Source: &staticSource{set: policy.NewSet(1, []*policy.Policy{
		compile(t, "open", "p", "failureMode: Open\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
		compile(t, "closed", "p", "failureMode: Closed\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
	})}})
	ctx := context.Background()
	check := func(ns, client string) *Outcome {
		t.Helper()
		r := request()
		r.Header = http.Header{"X-Client": {client}}
		out, err := c.Check(ctx, Input{Namespace: ns, Request: r})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, client := range []string{"a", "b", "c"} {
		if o := check("open", client); !o.Allowed || o.Degraded {
			t.Fatalf("client %s while there is room: %+v", client, o)
		}
	}

	const full = 20
	for i := range full {
		clock.Advance(6 * time.Millisecond) // store errors this far apart would count apart
		if o := check("open", "d"); !o.Allowed || !o.Degraded || !errors.Is(o.StoreErr, ratelimit.ErrCapacity) {
			t.Fatalf("new key %d, failureMode Open: allowed %v degraded %v err %v; want allowed by the failure mode, ErrCapacity", i, o.Allowed, o.Degraded, o.StoreErr)
		}
		if o := check("closed", "a"); o.Allowed || !o.Degraded || o.Reason != ReasonStoreUnavailable {
			t.Fatalf("new key %d, failureMode Closed: allowed %v degraded %v reason %s; want denied by the failure mode", i, o.Allowed, o.Degraded, o.Reason)
		}
		if s := c.Breaker().State(); s != BreakerClosed {
			t.Fatalf("breaker %s after %d checks of a full store", s, 2*(i+1))
		}
	}

	// The keys held are still decided by the store: one more for a, then
	// denied; b and c still have one.
	if o := check("open", "a"); !o.Allowed || o.Degraded || o.Limits[0].Remaining != 0 {
		t.Fatalf("held key a, second use: %+v", o)
	}
	if o := check("open", "a"); o.Allowed || o.Degraded || o.Reason != ReasonLimited {
		t.Fatalf("held key a, third use: allowed %v degraded %v reason %s; want denied by its limit", o.Allowed, o.Degraded, o.Reason)
	}
	if o := check("open", "b"); !o.Allowed || o.Degraded {
		t.Fatalf("held key b: %+v", o)
	}

	counters := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			counters[mf.GetName()] += m.GetCounter().GetValue()
		}
	}
	if counters["sluice_store_full_total"] != 2*full || counters["sluice_failure_mode_decisions_total"] != 2*full || counters["sluice_redis_errors_total"] != 0 {
		t.Fatalf("store full %v, failure-mode answers %v, store errors %v; want %d, %d, 0", counters["sluice_store_full_total"],
			counters["sluice_failure_mode_decisions_total"], counters["sluice_redis_errors_total"], 2*full, 2*full)
	}
}
