package rlqs_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// bound is the fleet-wide bound a window's admissions stay within
// (docs/concepts/quota-service.md): the limit, plus twice the largest
// assignment (what its token bucket admits in one interval: max_tokens
// and tokens_per_fill) each Envoy held in the window or the one before.
func bound(limit int64, envoys []*envoy, from, to time.Time, window time.Duration) int64 {
	b := limit
	for _, e := range envoys {
		b += 2 * e.largest(from.Add(-window), to)
	}
	return b
}

// Four Envoys on two check processes share one bucket of a window limit
// through Redis, with uneven traffic that moves between them: in every
// window the fleet admits at most the limit plus the stated bound, and
// at least half the limit (it is served, not denied).
func TestFleetWithinBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 seconds of traffic")
	}
	const (
		limit    = 200
		window   = 2 * time.Second
		interval = time.Second
	)
	store := redisBackend(t, redistest.Start(t))
	spec := "match: {domain: edge, descriptor: [{key: tenant}]}\nkey: '{descriptor:tenant}'\nlimits: [{name: w, fixedWindow: {limit: 200, window: 2s, alignment: Clock}}]"
	a := startProcess(t, store, rlqsOptions(), policytest.Compile(t, "ns", "quota", spec))
	b := startProcess(t, store, rlqsOptions(), policytest.Compile(t, "ns", "quota", spec))
	id := map[string]string{"tenant": "acme"}
	envoys := []*envoy{newEnvoy(a.open(t), id), newEnvoy(a.open(t), id), newEnvoy(b.open(t), id), newEnvoy(b.open(t), id)}
	half := 4 * time.Second
	rates := []func(time.Duration) float64{
		func(time.Duration) float64 { return 40 },
		func(d time.Duration) float64 { return pick(d < half, 150, 20) },
		func(d time.Duration) float64 { return pick(d < half, 20, 200) },
		func(time.Duration) float64 { return 60 },
	}
	start := time.Now().Truncate(window).Add(window) // a window's start, as Redis's clock aligns it
	time.Sleep(time.Until(start))
	end := start.Add(4 * window)
	var wg sync.WaitGroup
	for i, e := range envoys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run(t, start, end, interval, rates[i])
		}()
	}
	wg.Wait()
	var total int64
	for w := start; w.Before(end); w = w.Add(window) {
		var admitted int64
		for _, e := range envoys {
			admitted += e.admittedIn(w, w.Add(window))
		}
		total += admitted
		b := bound(limit, envoys, w, w.Add(window), window)
		t.Logf("window %s: %d admitted, limit %d, bound %d", w.Format("15:04:05"), admitted, limit, b)
		if admitted > b {
			t.Errorf("window %s: %d admitted, over the limit %d plus the bound (%d)", w.Format("15:04:05"), admitted, limit, b)
			for _, e := range envoys {
				t.Logf("  assignments: %s", e)
			}
		}
	}
	if total < 4*limit/2 {
		t.Errorf("%d admitted in 4 windows of a limit of %d with demand over it: the limit is not served", total, limit)
	}
}

func pick(cond bool, a, b float64) float64 {
	if cond {
		return a
	}
	return b
}

// An Envoy whose traffic grows gets the larger share within two
// reporting intervals, and the one whose traffic falls a smaller one.
func TestFairShares(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 7 seconds of traffic")
	}
	store := redisBackend(t, redistest.Start(t))
	p := startProcess(t, store, rlqsOptions(), policytest.Compile(t, "ns", "quota",
		"match: {domain: edge, descriptor: [{key: tenant}]}\nlimits: [{name: r, tokenBucket: {capacity: 100, refillRate: 100, refillInterval: 1s}}]"))
	id := map[string]string{"tenant": "acme"}
	grower, shrinker := newEnvoy(p.open(t), id), newEnvoy(p.open(t), id)
	const switchAt = 4 * time.Second
	start := time.Now()
	end := start.Add(switchAt + 2500*time.Millisecond)
	var wg sync.WaitGroup
	for e, rate := range map[*envoy]func(time.Duration) float64{
		grower:   func(d time.Duration) float64 { return pick(d < switchAt, 20, 150) },
		shrinker: func(d time.Duration) float64 { return pick(d < switchAt, 150, 20) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run(t, start, end, time.Second, rate)
		}()
	}
	wg.Wait()
	before := start.Add(switchAt)
	g, s := grower.largest(before.Add(-time.Second), before), shrinker.largest(before.Add(-time.Second), before)
	if g >= s {
		t.Errorf("before the switch: the Envoy at 20/s holds %d tokens, the one at 150/s %d", g, s)
	}
	last := func(e *envoy) held { e.mu.Lock(); defer e.mu.Unlock(); return e.holds[len(e.holds)-1] }
	if g, s := last(grower), last(shrinker); g.tokens <= s.tokens {
		t.Errorf("two intervals after the switch: the Envoy grown to 150/s holds %+v, the one fallen to 20/s %+v", g, s)
	}
	t.Logf("grower %s\nshrinker %s", grower, shrinker)
}

func (e *envoy) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := ""
	for _, h := range e.holds {
		s += h.at.Format("05.000") + ":" + h.action + "/" + itoa(h.tokens) + " "
	}
	return s
}

func itoa(n int64) string { return fmt.Sprint(n) }

// A token bucket limit refills all through a reporting interval, while a
// report's reservation takes only what it holds then: top-ups serve the
// refill too. An Envoy reporting every 3 s under a limit of 100 a second
// (capacity 100) with a demand of 400 a second is admitted, once its
// demand is known (its second report on), well over the 100 an interval
// that reservations at reports alone could give (over five eighths of
// the refill), and within the limit's own bound plus the stated one.
func TestTopUpsServeTheRefill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 12 seconds of traffic")
	}
	p := startProcess(t, redisBackend(t, redistest.Start(t)), rlqsOptions(), policytest.Compile(t, "ns", "quota",
		"match: {domain: edge, descriptor: [{key: tenant}]}\nlimits: [{name: r, tokenBucket: {capacity: 100, refillRate: 100, refillInterval: 1s}}]"))
	e := newEnvoy(p.open(t), map[string]string{"tenant": "acme"})
	const interval = 3 * time.Second
	start := time.Now()
	end := start.Add(4 * interval)
	e.run(t, start, end, interval, func(time.Duration) float64 { return 400 })
	steady := e.admittedIn(start.Add(interval), end)
	admitted := e.admittedIn(start, end)
	limit := 100 + 100*int64(end.Sub(start)/time.Second)
	b := limit + 2*e.largest(start, end)
	t.Logf("admitted %d in %s, %d from the second report; reservations at reports alone give at most %d then; bound %d\nassignments: %s",
		admitted, end.Sub(start), steady, 3*100+1, b, e)
	// The limit refills 900 over those 9 s; a report answered deny all
	// after a top-up loses that top-up (about 520 admitted then).
	if served := int64(3 * 300 * 5 / 8); steady <= served {
		t.Errorf("admitted %d in the last 3 intervals, not over %d of the 900 the limit refilled: the refill between reports is not served", steady, served)
	}
	if admitted > b {
		t.Errorf("admitted %d, over the limit's %d plus the bound", admitted, limit)
	}
}
