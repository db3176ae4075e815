package main

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// The algorithms' pictures are plotted from the Go model of each
// (internal/ratelimit/model), the reference the Lua library is tested to
// agree with: a simulated clock drives it through one burst and a steady
// trickle, so a picture changes when the algorithm does.

// Every picture's traffic: a burst at 0 s, then one request a second until
// trickleEnd, watched until horizon.
const (
	burst      = 15
	trickleEnd = 30 * time.Second
	horizon    = 45 * time.Second
	sampleStep = 250 * time.Millisecond
	// holdFor is how long a request holds its units in the concurrency
	// limit before it releases them.
	holdFor = 3 * time.Second
)

// start is the simulated clock's 0 s: 25 s before a midnight (UTC), so
// that the calendar day turns within the picture, and 5 s into a 10 s
// window of the epoch-aligned algorithms.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-25 * time.Second)

// algorithm is one picture: its file, title, and limit.
type algorithm struct {
	file, title, params string
	limit               ratelimit.Limit
}

func algorithms() []algorithm {
	return []algorithm{
		{"token-bucket", "Token bucket", "capacity 10, refillRate 1, refillInterval 2s",
			ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 1, Interval: 2 * time.Second}},
		{"fixed-window", "Fixed window", "limit 10, window 10s",
			ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 10, Interval: 10 * time.Second}},
		{"sliding-window-log", "Sliding window log", "limit 10, window 10s",
			ratelimit.Limit{Algorithm: ratelimit.SlidingWindowLog, Capacity: 10, Interval: 10 * time.Second}},
		{"sliding-window-counter", "Sliding window counter", "limit 10, window 10s",
			ratelimit.Limit{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 10, Interval: 10 * time.Second}},
		{"leaky-bucket", "Leaky bucket", "capacity 10, leakRate 1, leakInterval 2s",
			ratelimit.Limit{Algorithm: ratelimit.LeakyBucket, Capacity: 10, Rate: 1, Interval: 2 * time.Second}},
		{"gcra", "GCRA", "burst 10, rate 1, period 2s",
			ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 10, Rate: 1, Interval: 2 * time.Second}},
		{"calendar", "Calendar", "limit 10, period Day, timeZone UTC (midnight at 25 s)",
			ratelimit.CalendarLimit(10, ratelimit.Day, time.UTC)},
		{"concurrency", "Concurrency", "limit 10, leaseTimeout 10s; each admitted request releases after 3 s",
			ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 10, Interval: 10 * time.Second}},
	}
}

// request is one request of the traffic and what the model answered.
type request struct {
	at      time.Duration
	allowed bool
}

// point is the remaining capacity at a time.
type point struct {
	at        time.Duration
	remaining int64
}

// run is what the model answered over the traffic.
type run struct {
	requests  []request
	remaining []point
}

// simulate drives limit l's model through the traffic: at each step the
// due releases, then the arrivals, each deciding and consuming; the
// remaining capacity (what a cost-1 request would find, asked with cost 0,
// which changes nothing) is sampled before and after each step's events.
func simulate(l ratelimit.Limit) (run, error) {
	p, err := model.Compile(l)
	if err != nil {
		return run{}, err
	}
	var r run
	var s model.State
	releases := map[time.Duration][]string{}
	remaining := func(at time.Duration) {
		v, _ := model.Check(p, &s, micros(at), 0)
		r.remaining = append(r.remaining, point{at, v.Remaining})
	}
	for at := time.Duration(0); at <= horizon; at += sampleStep {
		remaining(at)
		for _, holder := range releases[at] {
			if _, next := model.Release(p, &s, micros(at), holder); next.Alg != 0 {
				s = next
			}
		}
		for i := range arrivals(at) {
			e := ratelimit.Entry{Limit: l, Cost: 1, Holder: fmt.Sprintf("r%d-%d", at/time.Millisecond, i)}
			v, next := model.Apply(p, &s, micros(at), &e, ratelimit.Consume)
			if v.Allowed {
				s = next
				if l.Algorithm == ratelimit.Concurrency {
					releases[at+holdFor] = append(releases[at+holdFor], e.Holder)
				}
			}
			r.requests = append(r.requests, request{at, v.Allowed})
		}
		remaining(at)
	}
	return r, nil
}

// arrivals is how many requests arrive at at.
func arrivals(at time.Duration) int {
	switch {
	case at == 0:
		return burst
	case at <= trickleEnd && at%time.Second == 0:
		return 1
	}
	return 0
}

func micros(at time.Duration) int64 { return start.Add(at).UnixMicro() }

// algorithmPages are docs/img/algorithms/<name>.svg.
func algorithmPages(string) ([]page, error) {
	var pages []page
	for _, a := range algorithms() {
		r, err := simulate(a.limit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.file, err)
		}
		pages = append(pages, page{"docs/img/algorithms/" + a.file + ".svg", plotRun(a, r)})
	}
	return pages, nil
}
