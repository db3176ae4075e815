package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestOutOfMemoryIsCapacity: a Redis over its maxmemory under noeviction
// refuses the library's calls (OOM); the store reports that as the store
// being full (ratelimit.ErrCapacity), having applied nothing, in both
// modes, and decides again once memory is freed.
func TestOutOfMemoryIsCapacity(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", "noeviction"))
			s := newStore(t, srv, redisstore.Options{Mode: mode})
			ctx := context.Background()
			l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Hour}
			one := func(value string) ratelimit.Request {
				return ratelimit.Request{Entries: []ratelimit.Entry{{Key: ratelimit.Key("ns", "p", value, "l"), Limit: l, Cost: 1}}}
			}
			if dec := check(t, s, one("held")); dec.Results[0].Remaining != 4 {
				t.Fatalf("before Redis is full: %+v", dec)
			}

			// Large values until one is refused, then new keys take the
			// last bytes until Redis is over its maxmemory.
			fill := srv.Client()
			value := strings.Repeat("x", 64<<10)
			filled := 0
			for ; fill.Set(ctx, fmt.Sprint("filler:", filled), value, 0).Err() == nil; filled++ {
				if filled > 1000 {
					t.Fatal("Redis took 64 MB under a maxmemory of 2 MB")
				}
			}
			var err error
			for i := 0; err == nil; i++ {
				if i > 100_000 {
					t.Fatal("100,000 new keys did not fill Redis")
				}
				req := one(fmt.Sprint("new", i))
				var dec ratelimit.Decision
				err = s.Check(ctx, 0, &req, &dec)
			}
			if !errors.Is(err, ratelimit.ErrCapacity) || !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("a check of a full Redis: %v; want ErrCapacity with Redis's OOM", err)
			}
			for range 3 {
				req := one("held")
				var dec ratelimit.Decision
				if err := s.Check(ctx, 0, &req, &dec); !errors.Is(err, ratelimit.ErrCapacity) {
					t.Fatalf("a check of a held key in a full Redis: %v; want ErrCapacity", err)
				}
			}

			for i := range filled {
				fill.Del(ctx, fmt.Sprint("filler:", i))
			}
			if dec := check(t, s, one("held")); dec.Results[0].Remaining != 3 {
				t.Fatalf("held key once Redis has room: %d left, want 3 (nothing applied while full)", dec.Results[0].Remaining)
			}
		})
	}
}
