package redisstore_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestDocumentedExamples runs each algorithm's documented behavior through the Lua
// library on a simulated clock, in both invocation modes.
func TestDocumentedExamples(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ratelimittest.RunExamples(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
				return newStore(t, srv, simOpts(clock, mode))
			})
		})
	}
}

// TestHolderExamples runs the duplicates' rule of concurrency limits
// through the Lua library, in both invocation modes; every key written
// has a TTL.
func TestHolderExamples(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ratelimittest.RunHolders(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
				return newStore(t, srv, simOpts(clock, mode))
			})
		})
	}
	ctx := context.Background()
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v: %v", keys, err)
	}
	for _, k := range keys {
		if ttl := srv.Client().PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has PTTL %s", k, ttl)
		}
	}
}

// TestHolderExamplesCluster runs the duplicates' rule on a Redis Cluster,
// where a request beside another policy's limits spans slots: the dry run
// that denies a duplicate writes nothing, so the real round that follows
// must remember it.
func TestHolderExamplesCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := newClient(t, cl.Addrs()...)
	ratelimittest.RunHolders(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return storeOver(t, client, simOpts(clock, redisstore.ModeFunctions))
	})
}

// TestReserveExamples runs reservations and their settlements through
// the Lua library, in both invocation modes; every key written has a TTL.
func TestReserveExamples(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ratelimittest.RunReserves(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
				return newStore(t, srv, simOpts(clock, mode))
			})
		})
	}
	ctx := context.Background()
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v: %v", keys, err)
	}
	for _, k := range keys {
		if ttl := srv.Client().PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has PTTL %s", k, ttl)
		}
	}
}

// TestReserveExamplesCluster runs them on a Redis Cluster, where a
// request beside another policy's limits spans slots: a duplicate the
// dry run denies is remembered by the real round that follows.
func TestReserveExamplesCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := newClient(t, cl.Addrs()...)
	ratelimittest.RunReserves(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return storeOver(t, client, simOpts(clock, redisstore.ModeFunctions))
	})
}
