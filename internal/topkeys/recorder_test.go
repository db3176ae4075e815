package topkeys

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/adminapi"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func top(t *testing.T, s Source, window time.Duration) *Answer {
	t.Helper()
	a, err := s.Top(context.Background(), "ns", "p", window)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func counts(l List) map[string]int64 {
	m := map[string]int64{}
	for _, e := range l.Entries {
		m[e.Key] = e.Count
	}
	return m
}

// A minute counts in a window while it overlaps the window's last
// minutes, and ages out after.
func TestWindowAgesOut(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	r := NewRecorder(c.Now)
	r.Record("ns", "p", "early", true, c.now)
	r.Record("ns", "p", "early", true, c.now)
	r.Record("ns", "p", "fine", false, c.now)
	r.Record("ns", "other", "elsewhere", true, c.now)

	c.now = c.now.Add(4*time.Minute + 59*time.Second)
	r.Record("ns", "p", "late", true, c.now)
	a := top(t, r, 5*time.Minute)
	if got := counts(a.Denied); got["early"] != 2 || got["late"] != 1 || len(got) != 2 {
		t.Fatalf("denied in the last 5 minutes: %v", got)
	}
	if got := counts(a.Admitted); got["fine"] != 1 || len(got) != 1 {
		t.Fatalf("admitted in the last 5 minutes: %v", got)
	}
	if got := counts(top(t, r, time.Minute).Denied); got["late"] != 1 || len(got) != 1 {
		t.Fatalf("denied in the last minute: %v", got)
	}

	c.now = c.now.Add(time.Second) // the first minute starts 5 minutes back
	if got := counts(top(t, r, 5*time.Minute).Denied); got["early"] != 2 || got["late"] != 1 {
		t.Fatalf("denied in the last 5 minutes, the first minute's start among them: %v", got)
	}
	c.now = c.now.Add(time.Minute) // all of the first minute is over 5 minutes back
	if got := counts(top(t, r, 5*time.Minute).Denied); got["early"] != 0 || got["late"] != 1 {
		t.Fatalf("denied after the first minute aged out: %v", got)
	}
	if got := counts(top(t, r, 6*time.Minute).Denied); got["early"] != 2 {
		t.Fatalf("denied in the last 6 minutes: %v", got)
	}

	// The ring's slot of a minute MaxWindow and one minute later is the
	// first minute's: it starts empty.
	c.now = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(MaxWindow + time.Minute)
	r.Record("ns", "p", "again", true, c.now)
	if got := counts(top(t, r, MaxWindow).Denied); got["early"] != 0 || got["again"] != 1 {
		t.Fatalf("denied %s later: %v", MaxWindow+time.Minute, got)
	}
	// A decision older than the slot's minute is out of every window.
	r.Record("ns", "p", "stale", true, c.now.Add(-MaxWindow-time.Minute))
	if got := counts(top(t, r, MaxWindow).Denied); got["stale"] != 0 {
		t.Fatalf("a stale decision was counted: %v", got)
	}

	// Once every minute of a policy is out of the longest window, its
	// ring goes.
	c.now = c.now.Add(MaxWindow + time.Minute)
	r.forgetOld()
	for _, p := range []string{"p", "other"} {
		if _, ok := r.policies.Load(policyID{"ns", p}); ok {
			t.Errorf("policy %s kept after its minutes aged out", p)
		}
	}
}

// checkLastMinutes checks that s's window covers the last minutes, not
// the clock's: decisions recorded at :50 of a minute are in a 1-minute
// window at :02 of the next, and in every window until all of their
// minute is older than the window. record records a denial at a time
// (and publishes it, for a Reader); s reads at c's time.
func checkLastMinutes(t *testing.T, c *clock, record func(key string, at time.Time), s Source) {
	t.Helper()
	base := c.now.Truncate(time.Minute)
	at := base.Add(50 * time.Second)
	for range 5 {
		record("burst", at)
	}
	record("older", base.Add(-time.Minute))
	for _, step := range []struct {
		now    time.Duration // after base
		window time.Duration
		want   int64 // burst's count
	}{
		{62 * time.Second, time.Minute, 5},
		{110 * time.Second, time.Minute, 5}, // exactly a minute after
		{2 * time.Minute, time.Minute, 0},   // its whole minute is older than the window
		{2 * time.Minute, 2 * time.Minute, 5},
		{5*time.Minute + 50*time.Second, 5 * time.Minute, 5},
		{6 * time.Minute, 5 * time.Minute, 0},
		{6 * time.Minute, 6 * time.Minute, 5},
		{15*time.Minute + 50*time.Second, MaxWindow, 5},
	} {
		c.now = base.Add(step.now)
		if got := counts(top(t, s, step.window).Denied)["burst"]; got != step.want {
			t.Errorf("at base+%s, the last %s: burst (5 at base+50s) counted %d, want %d", step.now, step.window, got, step.want)
		}
	}
	c.now = base.Add(10 * time.Second)
	if got := counts(top(t, s, time.Minute).Denied); got["older"] != 1 {
		t.Errorf("at base+10s, the last minute: %v, want older (at base-1m) in it", got)
	}
}

// TestWindowIsTheLastMinutes: the memory store's window covers the last
// minutes.
func TestWindowIsTheLastMinutes(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	r := NewRecorder(c.Now)
	checkLastMinutes(t, c, func(key string, at time.Time) { r.Record("ns", "p", key, true, at) }, r)
}

func TestWindowBounds(t *testing.T) {
	r := NewRecorder(nil)
	for _, w := range []time.Duration{0, 30 * time.Second, 90 * time.Second, MaxWindow + time.Minute} {
		if _, err := r.Top(context.Background(), "ns", "p", w); err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("window %s: %v, want an error naming the window", w, err)
		}
	}
	for s, want := range map[string]time.Duration{"": DefaultWindow, "1m": time.Minute, "15m": MaxWindow} {
		if d, err := adminapi.ParseTopWindow(s); err != nil || d != want {
			t.Errorf("ParseTopWindow(%q) = %s, %v; want %s", s, d, err, want)
		}
	}
	for _, s := range []string{"5", "abc", "16m", "-5m", "2m30s"} {
		if _, err := adminapi.ParseTopWindow(s); err == nil {
			t.Errorf("ParseTopWindow(%q) took it", s)
		}
	}
}

// A million distinct key values in one minute of one policy leave
// Capacity counters behind, whatever their number.
func TestMemoryIsBounded(t *testing.T) {
	now := time.Now()
	r := NewRecorder(func() time.Time { return now })
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	r.Record("ns", "p", "first", true, now)
	before := heap()
	for i := range 1_000_000 {
		r.Record("ns", "p", fmt.Sprint("key-", i), i%2 == 0, now)
	}
	grown := int64(heap()) - int64(before)
	v, _ := r.policies.Load(policyID{"ns", "p"})
	m := &v.(*ring).minutes[now.Unix()/60%int64(ringMinutes)]
	for _, s := range []*sketch{&m.denied, &m.admitted} {
		if len(s.held) > Capacity || len(s.heap) > Capacity {
			t.Fatalf("a sketch holds %d key values (heap %d), more than %d", len(s.held), len(s.heap), Capacity)
		}
	}
	t.Logf("a million distinct key values: the heap grew by %d bytes", grown)
	if grown > 64<<10 {
		t.Fatalf("the heap grew by %d bytes for a million distinct key values", grown)
	}
}
