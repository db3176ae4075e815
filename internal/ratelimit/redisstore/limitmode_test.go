package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestBanDeniesThroughEnforcedEntries: an enforcing penalty box's ban
// marks every entry of its bucket banned, but denies a request only
// through its enforced entries (the model's Decide): a request that meets
// the banned bucket by shadow entries alone (limits in mode Soft or
// Shadow) goes on, in the library as in the memory store and the model.
func TestBanDeniesThroughEnforcedEntries(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	lua := newStore(t, srv, simOpts(clock, redisstore.ModeFunctions))
	mem := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0))
	t.Cleanup(func() { _ = mem.Close() })
	ref := ratelimittest.NewReference(clock)
	box := ratelimit.Penalty{Denials: 1, Within: time.Hour, Ban: time.Minute, MaxBan: time.Minute}
	one := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Hour}
	hard := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "hard"), Limit: one, Cost: 1, Penalty: box}
	soft := ratelimit.Entry{Key: ratelimit.Key("ns", "p", "v", "soft"), Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}, Cost: 1, Penalty: box, Shadow: true}
	for name, s := range map[string]ratelimit.Store{"lua": lua, "memstore": mem, "model": ref} {
		check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{hard, soft}})
		if dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{hard, soft}}); dec.Allowed || dec.Results[0].Ban != time.Minute {
			t.Fatalf("%s: the enforced limit over: %+v; want denied, a 1m ban", name, dec)
		}
		dec := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{soft}})
		if !dec.Allowed || !dec.Results[0].Banned {
			t.Fatalf("%s: the shadow entry alone under the ban: %+v; want allowed, the entry marked banned", name, dec)
		}
	}
}
