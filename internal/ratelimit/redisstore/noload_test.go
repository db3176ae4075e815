package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestNoLoadNeverLoads: a store told not to load the library fails fast
// while it is missing, never sends FUNCTION LOAD, and works again as soon
// as another process (the controller) loads it.
func TestNoLoadNeverLoads(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	loader := newStore(t, srv, redisstore.Options{})
	checker := newStore(t, srv, redisstore.Options{NoLoad: true})
	req := ratelimit.Request{Entries: []ratelimit.Entry{{
		Key:   ratelimit.Key("ns", "p", "v", "l"),
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 10, Interval: time.Hour}, Cost: 1,
	}}}
	var dec ratelimit.Decision
	if err := checker.Check(ctx, 0, &req, &dec); !errors.Is(err, redisstore.ErrLibraryMissing) {
		t.Fatalf("before any load: %v, want ErrLibraryMissing", err)
	}
	if n := functionLoads(t, srv); n != 0 {
		t.Fatalf("the NoLoad store sent %d FUNCTION LOAD", n)
	}
	if err := loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(ctx, 0, &req, &dec); err != nil || !dec.Allowed {
		t.Fatalf("after the load: %v %+v", err, dec)
	}
	if err := srv.Client().FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(ctx, 0, &req, &dec); !errors.Is(err, redisstore.ErrLibraryMissing) {
		t.Fatalf("after FUNCTION FLUSH: %v, want ErrLibraryMissing", err)
	}
	if n := functionLoads(t, srv); n != 1 {
		t.Fatalf("%d FUNCTION LOAD in all, want only the loader's", n)
	}
}

func functionLoads(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_function|load:calls="); ok {
			n := 0
			for _, c := range v {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}
