package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

var ctx = context.Background()

// counting is a store that counts the calls that reach it: calls those
// that decide, givebacks the refunds (an expired lease's, made in the
// background at a moment of their own).
type counting struct {
	ratelimit.Store
	calls     atomic.Int64
	givebacks atomic.Int64
	delay     time.Duration
}

func (c *counting) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	if req.Action.Decides() {
		c.calls.Add(1)
	} else {
		c.givebacks.Add(1)
	}
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	return c.Store.Check(ctx, timeout, req, dec)
}

type fixture struct {
	clock *ratelimittest.Clock
	inner *counting
	store *lease.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memstore.New(memstore.WithClock(clock.Now))
	t.Cleanup(func() { _ = mem.Close() })
	inner := &counting{Store: mem}
	store := lease.New(ratelimit.Backend{Store: inner}, lease.Options{Now: clock.Now})
	t.Cleanup(func() { _ = store.Close() })
	return &fixture{clock: clock, inner: inner, store: store}
}

// entry is a limit of policy p on the bucket "global", leased units at a time.
func entry(p, name string, l ratelimit.Limit, units int64) ratelimit.Entry {
	return ratelimit.Entry{Key: ratelimit.Key("ns", p, "global", name), Limit: l, Cost: 1,
		Lease: ratelimit.Lease{Units: units, TTL: time.Second}}
}

func fixedWindow(limit int64, window time.Duration) ratelimit.Limit {
	return ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: limit, Interval: window}
}

func (f *fixture) check(t *testing.T, entries ...ratelimit.Entry) ratelimit.Decision {
	t.Helper()
	var dec ratelimit.Decision
	if err := f.store.Check(ctx, time.Second, &ratelimit.Request{Entries: entries}, &dec); err != nil {
		t.Fatalf("check: %v", err)
	}
	return dec
}

// inStore is what the wrapped store has left for e, asked exactly.
func (f *fixture) inStore(t *testing.T, e ratelimit.Entry) int64 {
	t.Helper()
	e.Cost, e.Lease = 0, ratelimit.Lease{}
	var dec ratelimit.Decision
	if err := f.inner.Store.Check(ctx, 0, &ratelimit.Request{Entries: []ratelimit.Entry{e}, Action: ratelimit.DryRun}, &dec); err != nil {
		t.Fatal(err)
	}
	return dec.Results[0].Remaining
}

func TestLeaseIsTakenOnceAndUsedUp(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	for i := range 10 {
		dec := f.check(t, e)
		if !dec.Allowed {
			t.Fatalf("check %d denied", i)
		}
		// The process knows its 10-1-i units and the 90 the store had left.
		if got, want := dec.Results[0].Remaining, int64(90+9-i); got != want {
			t.Fatalf("check %d: remaining %d, want %d", i, got, want)
		}
	}
	if calls := f.inner.calls.Load(); calls != 1 {
		t.Fatalf("ten checks on a lease of 10 made %d store calls, want 1", calls)
	}
	if left := f.inStore(t, e); left != 90 {
		t.Fatalf("the store has %d left after one lease of 10 of 100, want 90", left)
	}
	f.check(t, e) // the lease is used up: the next one is taken
	if calls, left := f.inner.calls.Load(), f.inStore(t, e); calls != 2 || left != 80 {
		t.Fatalf("after the eleventh check: %d store calls and %d left, want 2 and 80", calls, left)
	}
}

// refundedBy waits (up to 5s) until the store has given back units, which
// it does in the background.
func (f *fixture) refundedBy(t *testing.T, units int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.store.Stats().Refunded < units {
		if time.Now().After(deadline) {
			t.Fatalf("%d units given back after 5s, want %d (stats %+v)", f.store.Stats().Refunded, units, f.store.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if st := f.store.Stats(); st.Refunded != units || st.Dropped != 0 {
		t.Fatalf("stats %+v: want %d units given back and none dropped", st, units)
	}
}

func TestLeaseExpiresAndItsUnitsGoBack(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	f.check(t, e)
	f.check(t, e)
	f.clock.Advance(999 * time.Millisecond)
	f.check(t, e) // still within the ttl of 1s
	if calls := f.inner.calls.Load(); calls != 1 {
		t.Fatalf("%d store calls within the lease's ttl, want 1", calls)
	}
	f.clock.Advance(time.Millisecond)
	f.check(t, e)
	if calls := f.inner.calls.Load(); calls != 2 {
		t.Fatalf("%d store calls after the ttl, want 2 (a new lease)", calls)
	}
	// The 7 the expired lease held go back: the store counts the 3 it
	// admitted and the new lease.
	f.refundedBy(t, 7)
	if left := f.inStore(t, e); left != 87 {
		t.Fatalf("store has %d left, want 87", left)
	}
}

func TestCloseGivesBackWhatIsHeld(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	other := entry("q", "l", ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 50, Rate: 1, Interval: time.Hour}, 20)
	f.check(t, e)
	f.check(t, e)
	f.check(t, other)
	if left, left2 := f.inStore(t, e), f.inStore(t, other); left != 90 || left2 != 30 {
		t.Fatalf("the store has %d and %d left while the leases are held, want 90 and 30", left, left2)
	}
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	if st := f.store.Stats(); st.Refunded != 8+19 || st.Dropped != 0 {
		t.Fatalf("stats after Close %+v: want the 8 and 19 held given back", st)
	}
	if left, left2 := f.inStore(t, e), f.inStore(t, other); left != 98 || left2 != 49 {
		t.Fatalf("the store has %d and %d left after Close, want 98 and 49 (what was admitted)", left, left2)
	}
	// After Close, checks are still answered; what a lease holds then is dropped.
	if !f.check(t, e).Allowed {
		t.Fatal("a check after Close was denied")
	}
}

func TestLeaseTakesWhatIsLeftThenDenies(t *testing.T) {
	f := newFixture(t)
	f.clock.AlignTo(time.Minute)
	e := entry("p", "l", fixedWindow(25, time.Minute), 10)
	for i := range 25 {
		if !f.check(t, e).Allowed {
			t.Fatalf("check %d of 25 denied", i)
		}
	}
	// 10, 10, then 10 denied and the 5 left taken.
	if calls := f.inner.calls.Load(); calls != 4 {
		t.Fatalf("%d store calls, want 4", calls)
	}
	f.clock.Advance(20 * time.Second)
	dec := f.check(t, e)
	if dec.Allowed || dec.Results[0].RetryAfter != 40*time.Second {
		t.Fatalf("26th check: %+v, want denied until the window ends in 40s", dec)
	}
	calls := f.inner.calls.Load()
	f.clock.Advance(10 * time.Second)
	dec = f.check(t, e)
	if dec.Allowed || dec.Results[0].RetryAfter != 30*time.Second {
		t.Fatalf("27th check: %+v, want denied, retry in 30s", dec)
	}
	if f.inner.calls.Load() != calls {
		t.Fatal("a denied bucket was asked again before its retry time")
	}
	f.clock.Advance(30 * time.Second)
	if !f.check(t, e).Allowed {
		t.Fatal("denied in the next window")
	}
}

// TestDenialIsNotLaterThanTheBucketsForTheCost: a lease cannot be taken
// whole, and the retry time answered is the store's for the request's cost,
// not for a lease's worth.
func TestDenialIsNotLaterThanTheBucketsForTheCost(t *testing.T) {
	f := newFixture(t)
	tb := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: time.Second}
	e := entry("p", "tb", tb, 5)
	for range 10 {
		if !f.check(t, e).Allowed {
			t.Fatal("denied within capacity")
		}
	}
	dec := f.check(t, e)
	if dec.Allowed || dec.Results[0].RetryAfter != time.Second {
		t.Fatalf("empty bucket: %+v, want denied, retry in 1s (one token), not 5s (a lease)", dec)
	}
	f.clock.Advance(time.Second)
	if !f.check(t, e).Allowed {
		t.Fatal("denied at the retry time")
	}
}

func TestOneTakeForManyWaitingChecks(t *testing.T) {
	f := newFixture(t)
	f.inner.delay = 20 * time.Millisecond // the checks arrive while the take is under way
	e := entry("p", "l", fixedWindow(1000, time.Minute), 10)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 50 {
		wg.Go(func() {
			var dec ratelimit.Decision
			if err := f.store.Check(ctx, time.Second, &ratelimit.Request{Entries: []ratelimit.Entry{e}}, &dec); err != nil {
				t.Error(err)
			}
			if dec.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 50 {
		t.Fatalf("%d of 50 allowed", allowed.Load())
	}
	if calls := f.inner.calls.Load(); calls != 5 {
		t.Fatalf("50 concurrent checks on leases of 10 made %d store calls, want 5", calls)
	}
}

func TestExactWhereALeaseCannotDecide(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	plain := ratelimit.Entry{Key: ratelimit.Key("ns", "q", "global", "l"), Limit: fixedWindow(100, time.Minute), Cost: 1}
	peek := e
	peek.Cost = 0
	for _, tc := range []struct {
		name string
		req  ratelimit.Request
	}{
		{"a dry run", ratelimit.Request{Entries: []ratelimit.Entry{e}, Action: ratelimit.DryRun}},
		{"a cost of 0", ratelimit.Request{Entries: []ratelimit.Entry{peek}}},
		{"with a policy without a lease", ratelimit.Request{Entries: []ratelimit.Entry{e, plain}}},
	} {
		before := f.inner.calls.Load()
		var dec ratelimit.Decision
		if err := f.store.Check(ctx, 0, &tc.req, &dec); err != nil || !dec.Allowed {
			t.Fatalf("%s: %v %+v", tc.name, err, dec)
		}
		if f.inner.calls.Load() != before+1 {
			t.Fatalf("%s: not passed to the store", tc.name)
		}
	}
	if st := f.store.Stats(); st.Exact != 3 || st.Leased != 0 || f.inStore(t, e) != 99 || f.inStore(t, plain) != 99 {
		t.Fatalf("stats %+v, store %d and %d left: want 3 exact, the mixed request counted once in each", st, f.inStore(t, e), f.inStore(t, plain))
	}
}

// TestReservationsGoToTheStore: a reservation (and its settlement) is
// decided by the wrapped store exactly, its holder's record kept there,
// whatever the policy's lease.
func TestReservationsGoToTheStore(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	e.Cost, e.Holder, e.Reserve = 5, "req-1", time.Minute
	dec := f.check(t, e)
	if !dec.Allowed || dec.Results[0].Reserved != 5 || f.inStore(t, e) != 95 {
		t.Fatalf("reserve: %+v, store %d left: want 5 reserved in the store", dec, f.inStore(t, e))
	}
	if dup := f.check(t, e); dup.Allowed {
		t.Fatalf("a duplicate of the holder: %+v, want denied", dup)
	}
	settle := ratelimit.Request{Action: ratelimit.Settle, Entries: []ratelimit.Entry{{Key: e.Key, Limit: e.Limit, Cost: 2, Holder: "req-1", Lease: e.Lease}}}
	for _, want := range []bool{false, true} { // the duplicate's settlement first, then the holder's
		if err := f.store.Check(ctx, 0, &settle, &dec); err != nil || dec.Allowed != want {
			t.Fatalf("settle: %v %+v, want settled %v", err, dec, want)
		}
	}
	if st := f.store.Stats(); st.Leased != 0 || st.Takes != 0 || f.inStore(t, e) != 98 {
		t.Fatalf("stats %+v, store %d left: want nothing leased, 2 spent", st, f.inStore(t, e))
	}
}

// TestAllOrNothingAcrossLeasedBuckets: when one leased bucket denies, the
// units reserved from another go back to its lease.
func TestAllOrNothingAcrossLeasedBuckets(t *testing.T) {
	f := newFixture(t)
	f.clock.AlignTo(time.Minute)
	wide := entry("wide", "l", fixedWindow(100, time.Minute), 10)
	narrow := entry("narrow", "l", fixedWindow(2, time.Minute), 2)
	for range 2 {
		if !f.check(t, wide, narrow).Allowed {
			t.Fatal("denied within both limits")
		}
	}
	dec := f.check(t, wide, narrow)
	if dec.Allowed || !dec.Results[0].Allowed || dec.Results[1].Allowed {
		t.Fatalf("third check: %+v, want denied by the narrow limit only", dec)
	}
	if dec.Results[0].Remaining != 98 {
		t.Fatalf("the wide limit reports %d remaining, want 98 (8 held, 90 in the store)", dec.Results[0].Remaining)
	}
	// The wide lease kept its 8: eight checks of it alone take nothing more.
	calls := f.inner.calls.Load()
	for range 8 {
		if !f.check(t, wide).Allowed {
			t.Fatal("wide alone denied")
		}
	}
	if f.inner.calls.Load() != calls {
		t.Fatal("the units reserved for a denied request were not put back")
	}
}

func TestAChangedLimitGivesTheLeaseBack(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	f.check(t, e)
	e.Limit.Capacity = 50
	f.check(t, e)
	// A new lease for the new limit; the old one's 9 go back to the old limit.
	f.refundedBy(t, 9)
	if calls, givebacks := f.inner.calls.Load(), f.inner.givebacks.Load(); calls != 2 || givebacks != 1 {
		t.Fatalf("%d store calls and %d refunds, want two takes and a refund", calls, givebacks)
	}
	if left := f.inStore(t, e); left != 50-1-10 {
		t.Fatalf("the store has %d left of the new limit, want 39 (the first check's unit and the new lease's 10)", left)
	}
}

func TestStoreErrorsReachTheCaller(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(100, time.Minute), 10)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	var dec ratelimit.Decision
	if err := f.store.Check(canceled, 0, &ratelimit.Request{Entries: []ratelimit.Entry{e}}, &dec); err == nil {
		t.Fatal("a take that failed was answered")
	}
	if !f.check(t, e).Allowed {
		t.Fatal("the next take was not made")
	}
}

// nodes is a store whose keys live on named nodes; it counts the times
// its map of nodes was to be read again.
type nodes struct {
	refreshed *int
}

func (nodes) NodesOf(_ context.Context, _ *ratelimit.Request, dst []string) []string {
	return append(dst, "a")
}
func (nodes) AllNodes(context.Context) ([]string, error) { return []string{"a", "b"}, nil }
func (n nodes) RefreshNodes()                            { *n.refreshed++ }

// TestBackendOfTheWrappedStore: the lease layer's Backend checks through
// the leases, and is the wrapped store's for what it does not change: a
// breaker per node sees through it, and lifts and the index of bans reach
// the wrapped store; a store without a capability gives none.
func TestBackendOfTheWrappedStore(t *testing.T) {
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	refreshed := 0
	inner := mem.Backend()
	inner.Nodes = nodes{&refreshed}
	s := lease.New(inner, lease.Options{})
	t.Cleanup(func() { _ = s.Close() })
	b := s.Backend()
	if b.Store != s || b.Refunds != s || b.Denials != s {
		t.Fatalf("the lease layer's Backend does not check, refund and remember denials through it: %+v", b)
	}
	if got := b.Nodes.NodesOf(ctx, &ratelimit.Request{}, nil); len(got) != 1 || got[0] != "a" {
		t.Fatalf("NodesOf = %v, want [a]", got)
	}
	if b.Nodes.RefreshNodes(); refreshed != 1 {
		t.Fatalf("RefreshNodes reached the wrapped store %d times, want 1", refreshed)
	}
	if b.BanIndex != inner.BanIndex || b.Evictions != inner.Evictions {
		t.Fatalf("the index of bans or the evictions are not the wrapped store's: %+v", b)
	}
	e := entry("p", "l", fixedWindow(2, time.Minute), 2)
	e.Lease = ratelimit.Lease{} // a leased policy has no penalty box
	e.Penalty = ratelimit.Penalty{Denials: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Minute}
	var dec ratelimit.Decision
	for range 3 {
		if err := b.Store.Check(ctx, time.Second, &ratelimit.Request{Entries: []ratelimit.Entry{e}}, &dec); err != nil {
			t.Fatal(err)
		}
	}
	if dec.Allowed || dec.Results[0].BanLeft == 0 {
		t.Fatalf("the third request: %+v; want banned", dec.Results[0])
	}
	if err := b.Resetter.Lift(ctx, e.Key); err != nil {
		t.Fatal(err)
	}
	if err := mem.Check(ctx, time.Second, &ratelimit.Request{Entries: []ratelimit.Entry{e}, Action: ratelimit.DryRun}, &dec); err != nil || dec.Results[0].Banned {
		t.Fatalf("after the lift through the lease layer: %+v, %v; want the wrapped store's ban lifted", dec.Results[0], err)
	}
	if none := lease.New(ratelimit.Backend{Store: mem}, lease.Options{}).Backend(); none.Nodes != nil || none.Resetter != nil || none.BanIndex != nil {
		t.Fatalf("capabilities the wrapped store has not: %+v", none)
	}
}

// TestRememberedBanEndsWithTheBan: a denial the store answered with a ban
// is remembered until the ban's end, not until the retry of the limit
// whose denial issued it: after the ban the store decides (the full
// window denies again, which counts towards a new ban, twice as long).
func TestRememberedBanEndsWithTheBan(t *testing.T) {
	f := newFixture(t)
	e := entry("p", "l", fixedWindow(2, time.Minute), 2)
	e.Penalty = ratelimit.Penalty{Denials: 1, Within: time.Minute, Ban: 5 * time.Second, MaxBan: time.Minute}
	f.check(t, e)
	f.check(t, e)
	if dec := f.check(t, e); dec.Allowed || dec.Results[0].BanLeft != 5*time.Second {
		t.Fatalf("the third request: %+v; want denied, the bucket banned for 5s", dec.Results[0])
	}
	f.clock.Advance(time.Second)
	if dec := f.check(t, e); dec.Allowed || !dec.Results[0].Banned {
		t.Fatalf("during the ban: %+v; want banned", dec.Results[0])
	}
	f.clock.Advance(4 * time.Second)
	calls := f.inner.calls.Load()
	if dec := f.check(t, e); dec.Allowed || f.inner.calls.Load() == calls || dec.Results[0].BanLeft != 10*time.Second {
		t.Fatalf("at the ban's end: %+v after %d store calls; want the store's denial and a new ban of 10s", dec.Results[0], f.inner.calls.Load()-calls)
	}
}
