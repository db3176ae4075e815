package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestRequestBound: a request of ratelimit.MaxEntries entries (1,024
// buckets of 8 limits: a namespace of that many policies that all match)
// is decided in one atomic step, all or nothing; one entry more is an
// invalid request.
func TestRequestBound(t *testing.T) {
	s := newSim(t, ratelimittest.FutureClock())
	tb := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 2, Rate: 1, Interval: time.Hour}
	once := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Hour}
	req := ratelimit.Request{}
	for b := range ratelimit.MaxEntries / 8 {
		for l := range 8 {
			req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", fmt.Sprintf("p%04d", b), "v", fmt.Sprint("l", l)), Limit: tb, Cost: 1})
		}
	}
	last := &req.Entries[len(req.Entries)-1]
	last.Limit = once
	var dec ratelimit.Decision
	ctx := context.Background()
	if err := s.Check(ctx, 0, &req, &dec); err != nil || !dec.Allowed || len(dec.Results) != ratelimit.MaxEntries || dec.Results[0].Remaining != 1 {
		t.Fatalf("first request of %d entries: %v, allowed %v, %d results", len(req.Entries), err, dec.Allowed, len(dec.Results))
	}
	if err := s.Check(ctx, 0, &req, &dec); err != nil || dec.Allowed || dec.Results[0].Remaining != 1 {
		t.Fatalf("second request: %v, allowed %v, first %+v; want denied by the last entry, nothing consumed", err, dec.Allowed, dec.Results[0])
	}
	req.Entries = append(req.Entries, ratelimit.Entry{Key: "one more", Limit: tb, Cost: 1})
	if err := s.Check(ctx, 0, &req, &dec); err == nil {
		t.Fatalf("request of %d entries: no error", len(req.Entries))
	}
}
