package model_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestCalendarWindows: the calendar's windows of 2026 (Berlin's 23-hour
// 29 March and 25-hour 25 October, Chatham's 25-hour 5 April and 23-hour
// 27 September, February's 28 days) at a fixed clock.
func TestCalendarWindows(t *testing.T) {
	ratelimittest.RunCalendar(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func(_ *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return ratelimittest.NewReference(clock)
	})
}

// TestCalendarState: a state counts until the end of its own window,
// whatever the clock or the limit did since.
func TestCalendarState(t *testing.T) {
	berlin, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.Compile(ratelimit.CalendarLimit(3, ratelimit.Day, berlin))
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin) // 23 hours
	end := day.AddDate(0, 0, 1).UnixMicro()
	v, full := model.Check(p, &model.State{Alg: ratelimit.Calendar, A: 2, B: end}, day.UnixMicro(), 1)
	if !v.Allowed || v.RemainingAfter != 0 || v.ResetAfter != (23*time.Hour).Microseconds() || full.Alg != ratelimit.Calendar || full.A != 3 || full.B != end {
		t.Fatalf("at midnight: %+v, next %+v", v, full)
	}

	// The clock steps back across midnight: the later day stays the window.
	back := day.Add(-time.Minute).UnixMicro()
	if v, _ := model.Check(p, &full, back, 1); v.Allowed || v.RetryAfter != end-back || v.Reset != end-back {
		t.Errorf("clock stepped back: %+v", v)
	}
	// Edited to UTC: the count lasts until its Berlin midnight, then the
	// UTC day starts empty at the next UTC midnight.
	utc, _ := model.Compile(ratelimit.CalendarLimit(3, ratelimit.Day, time.UTC))
	if v, _ := model.Check(utc, &full, end-1, 1); v.Allowed || v.RetryAfter != 1 {
		t.Errorf("edited to UTC, before the Berlin midnight: %+v", v)
	}
	if v, _ := model.Check(utc, &full, end, 1); !v.Allowed || v.ResetAfter != time.Hour.Microseconds()*2 {
		t.Errorf("edited to UTC, at the Berlin midnight (22:00 UTC): %+v", v)
	}
	// A refund gives back within the window only.
	if v, next := model.Refund(p, &full, end-1, 2); v.Remaining != 2 || next.A != 1 || next.B != end {
		t.Errorf("refund: %+v, next %+v", v, next)
	}
	if _, next := model.Refund(p, &full, end, 2); next.Alg != 0 {
		t.Errorf("refund after the window: next %+v", next)
	}
}
