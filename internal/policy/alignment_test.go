package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestFixedWindowAlignment: fixedWindow.alignment picks the engine's
// algorithm and shows in the summary; the quota window is the window.
func TestFixedWindowAlignment(t *testing.T) {
	tests := []struct {
		name      string
		alignment string
		alg       ratelimit.Algorithm
		summary   string
	}{
		{"unset", "", ratelimit.FixedWindow, "l=fixedWindow(100/1h)"},
		{"FirstRequest", "alignment: FirstRequest", ratelimit.FixedWindow, "l=fixedWindow(100/1h)"},
		{"Clock", "alignment: Clock", ratelimit.FixedWindowClock, "l=fixedWindow(100/1h,clock)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, "limits: [{name: l, fixedWindow: {limit: 100, window: 1h, "+tt.alignment+"}}]\n")
			want := ratelimit.Limit{Algorithm: tt.alg, Capacity: 100, Interval: time.Hour}
			if l := p.Limits[0]; l.Limit != want || l.Window != time.Hour {
				t.Errorf("limit %+v window %s, want %+v window 1h", l.Limit, l.Window, want)
			}
			if p.Summary != tt.summary {
				t.Errorf("summary %q, want %q", p.Summary, tt.summary)
			}
			if e := p.AppendEntries(nil, "v", 1); e[0].Limit != want {
				t.Errorf("entry limit %+v", e[0].Limit)
			}
		})
	}
	p := mustCompile(t, `
limits:
- {name: burst, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}
- {name: day, fixedWindow: {limit: 1000, window: 24h, alignment: Clock}}
`)
	if p.Summary != "burst=tokenBucket(10,+1/1s) day=fixedWindow(1000/24h,clock)" {
		t.Errorf("summary %q", p.Summary)
	}
}

// TestAlignmentErrorsNameTheField: files in local mode do not pass through
// the API server's enum and CEL rule, so the compiler repeats them.
func TestAlignmentErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []string
	}{
		{"unknown value", "limits: [{name: l, fixedWindow: {limit: 1, window: 1s, alignment: Hour}}]",
			[]string{"spec.limits[0].fixedWindow.alignment", `Unsupported value: "Hour"`, `"FirstRequest"`, `"Clock"`}},
		{"values are case-sensitive", "limits: [{name: a, tokenBucket: {capacity: 1, refillRate: 1, refillInterval: 1s}}, {name: l, fixedWindow: {limit: 1, window: 1s, alignment: clock}}]",
			[]string{"spec.limits[1].fixedWindow.alignment", `Unsupported value: "clock"`}},
		{"sliding window log", "limits: [{name: l, slidingWindowLog: {limit: 1, window: 1s, alignment: Clock}}]",
			[]string{"spec.limits[0].slidingWindowLog.alignment", "Forbidden", "fixedWindow's only"}},
		{"sliding window counter", "limits: [{name: l, slidingWindowCounter: {limit: 1, window: 1s, alignment: FirstRequest}}]",
			[]string{"spec.limits[0].slidingWindowCounter.alignment", "Forbidden", "fixedWindow's only"}},
		{"with other errors", "limits: [{name: l, slidingWindowLog: {limit: 0, window: 1s, alignment: Clock}}]",
			[]string{"spec.limits[0].slidingWindowLog.alignment", "spec.limits[0].slidingWindowLog.limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileYAML(tt.spec)
			if err == nil {
				t.Fatal("compiled an invalid spec")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestClockAlignedLimitCounts: the compiled limit counts clock-aligned
// windows in the engine: 59.5s past a minute, 3 pass, the 4th is told to
// come back at the minute, when the count is fresh.
func TestClockAlignedLimitCounts(t *testing.T) {
	p := mustCompile(t, "limits: [{name: l, fixedWindow: {limit: 3, window: 1m, alignment: Clock}}]\n")
	clock := ratelimittest.FutureClock() // on an hour
	store := ratelimittest.NewReference(clock)
	clock.Advance(59500 * time.Millisecond)
	req := ratelimit.Request{Entries: p.AppendEntries(nil, "203.0.113.7", p.Cost)}
	var dec ratelimit.Decision
	check := func() ratelimit.Result {
		t.Helper()
		if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
			t.Fatal(err)
		}
		return dec.Results[0]
	}
	for i := range 3 {
		if r := check(); !r.Allowed || r.Remaining != int64(2-i) || r.Reset != 500*time.Millisecond {
			t.Fatalf("request %d: %+v", i+1, r)
		}
	}
	if r := check(); r.Allowed || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("4th request: %+v", r)
	}
	clock.Advance(500 * time.Millisecond)
	if r := check(); !r.Allowed || r.Remaining != 2 || r.Reset != time.Minute {
		t.Fatalf("at the minute: %+v", r)
	}
}
