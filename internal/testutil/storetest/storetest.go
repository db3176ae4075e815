// Package storetest makes the stores tests of the check path run on: the
// in-memory store, and the Redis store over a redistest server, each
// closed when the test ends.
package storetest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

// Memory returns an in-memory store on the clock now (nil: the real
// clock) made with opts (a key cap, no sweeper), closed when the test ends.
func Memory(t testing.TB, now func() time.Time, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	if now != nil {
		opts = append(opts, memstore.WithClock(now))
	}
	s := memstore.New(opts...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Redis returns a Redis store over the redis-server at addr (a
// redistest.Server's Addr), on a client of its own as a check process
// makes it; store and client are closed when the test ends.
func Redis(t testing.TB, addr string) *redisstore.Store {
	t.Helper()
	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{addr}})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
