package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// wideRequest is one request of buckets buckets of limits limits each (a
// namespace of that many policies without a match): every limit a token
// bucket of capacity 2, except that the last limit of the last bucket is
// last.
func wideRequest(buckets, limits int, last ratelimit.Limit) *ratelimit.Request {
	tb := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 2, Rate: 1, Interval: time.Hour}
	req := &ratelimit.Request{}
	for b := range buckets {
		for l := range limits {
			lim := tb
			if b == buckets-1 && l == limits-1 {
				lim = last
			}
			req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", fmt.Sprintf("p%03d", b), "v", fmt.Sprint("l", l)), Limit: lim, Cost: 1})
		}
	}
	return req
}

// TestRequestOverOneCall: a request of more entries than one library call
// takes (ratelimit.MaxCallEntries) is decided in several calls, as a
// request over several Cluster slots is: a dry run of every call, then the
// consuming calls. It is all or nothing: a denial in the last call leaves
// every other bucket untouched; and when a concurrent consumer takes the
// room of a later call between the rounds, what the earlier calls took is
// given back.
func TestRequestOverOneCall(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			clock := ratelimittest.FutureClock()
			s := newStore(t, srv, simOpts(clock, mode))
			if err := s.EnsureLoaded(context.Background()); err != nil {
				t.Fatal(err)
			}
			once := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Hour}
			req := wideRequest(60, 5, once) // 300 entries: two calls
			if len(req.Entries) <= ratelimit.MaxCallEntries {
				t.Fatalf("%d entries fit one call", len(req.Entries))
			}
			first, _ := ratelimit.SplitKey(req.Entries[0].Key)
			lastKey := req.Entries[len(req.Entries)-1].Key

			before := s.Stats().Calls
			dec := check(t, s, *req)
			if !dec.Allowed || len(dec.Results) != 300 || dec.Results[0].Remaining != 1 || dec.Results[299].Remaining != 0 {
				t.Fatalf("first request: allowed %v, %d results, first remaining %d, last %d", dec.Allowed, len(dec.Results), dec.Results[0].Remaining, dec.Results[299].Remaining)
			}
			if n := s.Stats().Calls - before; n != 4 {
				t.Fatalf("allowed request of 300 entries made %d calls, want 2 dry runs + 2 consuming", n)
			}

			state := dump(t, srv, first)
			dec = check(t, s, *req)
			if dec.Allowed || !dec.Results[0].Allowed || dec.Results[0].Remaining != 1 || dec.Results[299].Allowed {
				t.Fatalf("second request: allowed %v, first %+v, last %+v", dec.Allowed, dec.Results[0], dec.Results[299])
			}
			if got := dump(t, srv, first); got != state {
				t.Fatal("a request denied by its last call changed the first call's buckets")
			}

			// A concurrent consumer takes the last limit between the rounds:
			// the consuming round's last call denies, and the first call's
			// units go back.
			clock.Advance(time.Hour)
			redisstore.BetweenRounds(s, func() {
				steal := ratelimit.Request{Entries: []ratelimit.Entry{{Key: lastKey, Limit: once, Cost: 1}}}
				if d := check(t, s, steal); !d.Allowed {
					t.Error("the concurrent consumer was denied")
				}
			})
			dec = check(t, s, *req)
			redisstore.BetweenRounds(s, nil)
			if dec.Allowed || dec.Results[299].Allowed {
				t.Fatalf("request that lost the race: allowed %v, last %+v", dec.Allowed, dec.Results[299])
			}
			peek := *req
			peek.Action = ratelimit.DryRun
			peek.Entries = peek.Entries[:len(peek.Entries)-1]
			for i, r := range check(t, s, peek).Results {
				if r.Remaining != 1 { // each took 1 in the first request, refilled by 1 since
					t.Fatalf("entry %d (%s) has %d left after the request that lost the race: want 1, its units given back", i, peek.Entries[i].Key, r.Remaining)
				}
			}
		})
	}
}

// TestRequestBound: ratelimit.MaxEntries entries are decided; one more is
// an invalid request, refused before anything is sent.
func TestRequestBound(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Options{})
	fw := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Minute}
	req := wideRequest(ratelimit.MaxEntries/8, 8, fw)
	dec := check(t, s, *req)
	if !dec.Allowed || len(dec.Results) != ratelimit.MaxEntries {
		t.Fatalf("request of %d entries: allowed %v, %d results", len(req.Entries), dec.Allowed, len(dec.Results))
	}
	req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", "one", "more", "l"), Limit: fw, Cost: 1})
	calls := s.Stats().Calls
	var d ratelimit.Decision
	if err := s.Check(context.Background(), 0, req, &d); err == nil || s.Stats().Calls != calls {
		t.Fatalf("request of %d entries: error %v after %d calls; want an invalid request, nothing sent", len(req.Entries), err, s.Stats().Calls-calls)
	}
}

// TestReservationOfALostRaceGoesBack: a request over several calls whose
// consuming round loses the race after its first call reserved gives the
// units back and its reservation goes with them (it is settled at 0), so
// that the holder's later settlement settles nothing.
func TestReservationOfALostRaceGoesBack(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	s := newStore(t, srv, simOpts(clock, modes[0]))
	once := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Hour}
	req := wideRequest(60, 5, once) // 300 entries: two calls
	budget := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}
	first := ratelimit.Entry{Key: ratelimit.Key("ns", "budget", "v", "tokens"), Limit: budget, Cost: 30, Holder: "req-1", Reserve: time.Minute}
	req.Entries = append([]ratelimit.Entry{first}, req.Entries[1:]...)
	lastKey := req.Entries[len(req.Entries)-1].Key
	redisstore.BetweenRounds(s, func() {
		if d := check(t, s, ratelimit.Request{Entries: []ratelimit.Entry{{Key: lastKey, Limit: once, Cost: 1}}}); !d.Allowed {
			t.Error("the concurrent consumer was denied")
		}
	})
	dec := check(t, s, *req)
	redisstore.BetweenRounds(s, nil)
	if dec.Allowed || dec.Results[len(req.Entries)-1].Allowed {
		t.Fatalf("request that lost the race: %+v", dec.Results[len(req.Entries)-1])
	}
	peek := first
	peek.Holder, peek.Cost = "", 0
	if r := check(t, s, ratelimit.Request{Action: ratelimit.DryRun, Entries: []ratelimit.Entry{peek}}).Results[0]; r.Remaining != 100 || r.Reserved != 0 {
		t.Fatalf("budget after the lost race: %+v, want its 30 back and nothing reserved", r)
	}
	settle := ratelimit.Request{Action: ratelimit.Settle, Entries: []ratelimit.Entry{{Key: first.Key, Limit: budget, Cost: 50, Holder: "req-1"}}}
	if d := check(t, s, settle); d.Allowed || d.Results[0].Remaining != 100 {
		t.Fatalf("settlement of the lost race's holder: %+v, want nothing settled", d)
	}
}
