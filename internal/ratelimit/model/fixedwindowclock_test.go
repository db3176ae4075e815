package model_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

func clockWindow(t *testing.T, limit int64, window time.Duration) model.Params {
	t.Helper()
	p, err := model.Compile(ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: limit, Interval: window})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func micros(s string) int64 {
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return at.UnixMicro()
}

// TestFixedWindowClockAlignment: windows are multiples of the window since
// the Unix epoch (envoyproxy/ratelimit's now/unit*unit), the same for every
// key: a day starts at 00:00 UTC whenever a key's first request comes.
func TestFixedWindowClockAlignment(t *testing.T) {
	day := clockWindow(t, 1000, 24*time.Hour)
	midnight := micros("2026-03-11T00:00:00Z")
	for _, at := range []string{"2026-03-10T00:00:00Z", "2026-03-10T06:15:00Z", "2026-03-10T17:30:00.5Z", "2026-03-10T23:59:59.999999Z"} {
		now := micros(at)
		v, next := model.Check(day, nil, now, 1)
		if !v.Allowed || v.RemainingAfter != 999 || v.ResetAfter != midnight-now {
			t.Errorf("first request at %s: %+v, want reset %dµs (midnight)", at, v, midnight-now)
		}
		if want := now / day.Interval * day.Interval; next.B != want || next.A != 1 {
			t.Errorf("first request at %s: state %+v, want count 1 from %d", at, next, want)
		}
	}
	// At midnight the day is fresh.
	st := model.State{Alg: ratelimit.FixedWindowClock, A: 1000, B: micros("2026-03-10T00:00:00Z")}
	if v, _ := model.Check(day, &st, midnight-1, 1); v.Allowed || v.RetryAfter != 1 || v.Reset != 1 {
		t.Errorf("1µs before midnight: %+v", v)
	}
	if v, _ := model.Check(day, &st, midnight, 1000); !v.Allowed || v.Remaining != 1000 || v.ResetAfter != 24*time.Hour.Microseconds() {
		t.Errorf("at midnight: %+v", v)
	}

	// A 7s window is aligned to the epoch too, not to the minute.
	p := clockWindow(t, 1, 7*time.Second)
	now := micros("2026-03-10T12:00:00Z") // 1773144000s = 7*253306285 + 5
	if v, _ := model.Check(p, nil, now, 1); v.ResetAfter != 2*time.Second.Microseconds() {
		t.Errorf("7s window: %+v, want reset 2s", v)
	}
}

// TestFixedWindowClockState: what a stored state means at other times.
func TestFixedWindowClockState(t *testing.T) {
	minute := time.Minute.Microseconds()
	p := clockWindow(t, 3, time.Minute)
	base := micros("2026-03-10T10:05:00Z")
	full := model.State{Alg: ratelimit.FixedWindowClock, A: 3, B: base}

	// The clock steps back into the previous window: the stored window
	// stays, and durations are measured from the real now.
	back := base - 10*time.Second.Microseconds()
	if v, _ := model.Check(p, &full, back, 1); v.Allowed || v.Remaining != 0 || v.RetryAfter != minute+10_000_000 || v.Reset != minute+10_000_000 {
		t.Errorf("clock stepped back: %+v", v)
	}

	// Another algorithm's state, even FixedWindow's same numbers, is untouched.
	fw := model.State{Alg: ratelimit.FixedWindow, A: 3, B: base}
	if v, _ := model.Check(p, &fw, base+1, 1); !v.Allowed || v.Remaining != 3 || v.Reset != 0 {
		t.Errorf("over FixedWindow's state: %+v", v)
	}

	// The window was edited from 1m to 1h: the count of 10:05 belongs to the
	// hour from 10:00, which ends at 11:00, not at 11:05.
	hour := clockWindow(t, 5, time.Hour)
	now := micros("2026-03-10T10:20:00Z")
	v, next := model.Check(hour, &full, now, 1)
	if !v.Allowed || v.Remaining != 2 || v.ResetAfter != 40*minute || next.B != micros("2026-03-10T10:00:00Z") {
		t.Errorf("window edited to 1h: %+v, next %+v", v, next)
	}
	if v, _ := model.Check(hour, &full, micros("2026-03-10T11:00:00Z"), 5); !v.Allowed || v.Remaining != 5 {
		t.Errorf("window edited to 1h, next hour: %+v", v)
	}
}
