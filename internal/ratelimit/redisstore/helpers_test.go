package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// newClient returns a store-ready client for addrs, closed after the test.
func newClient(t testing.TB, addrs ...string) redis.UniversalClient {
	t.Helper()
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: addrs, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store over a new client for srv, closed after the test.
func newStore(t testing.TB, srv *redistest.Server, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	return storeOver(t, newClient(t, srv.Addr()), opts)
}

func storeOver(t testing.TB, c redis.UniversalClient, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// simOpts drives the library's clock from clock.
func simOpts(clock *ratelimittest.Clock, mode redisstore.Mode) redisstore.Options {
	return redisstore.Options{Mode: mode, Clock: clock.Now}
}

func check(t testing.TB, s ratelimit.Store, req ratelimit.Request) ratelimit.Decision {
	t.Helper()
	var dec ratelimit.Decision
	if err := s.Check(context.Background(), 0, &req, &dec); err != nil {
		t.Fatal(err)
	}
	return dec
}

var modes = []redisstore.Mode{redisstore.ModeFunctions, redisstore.ModeScripts}
