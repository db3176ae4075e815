package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func TestScaleLimit(t *testing.T) {
	tests := []struct {
		name string
		in   ratelimit.Limit
		q    int64
		want ratelimit.Limit
	}{
		{"a window takes q as its limit",
			ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Minute}, 1000,
			ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1000, Interval: time.Minute}},
		{"a token bucket's rate scales with its capacity",
			ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 10, Rate: 5, Interval: time.Second}, 100,
			ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 100, Rate: 50, Interval: time.Second}},
		{"a fraction of the rate stretches the interval",
			ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 10, Rate: 1, Interval: time.Second}, 15,
			ratelimit.Limit{Algorithm: ratelimit.GCRA, Capacity: 15, Rate: 3, Interval: 2 * time.Second}},
		{"a smaller quota slows the leak",
			ratelimit.Limit{Algorithm: ratelimit.LeakyBucket, Capacity: 100, Rate: 10, Interval: time.Second}, 10,
			ratelimit.Limit{Algorithm: ratelimit.LeakyBucket, Capacity: 10, Rate: 1, Interval: time.Second}},
		{"the same quota changes nothing",
			ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 7, Rate: 3, Interval: time.Second}, 7,
			ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 7, Rate: 3, Interval: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ScaleLimit(tt.in, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if quotaWindow(got) != quotaWindow(tt.in) && tt.in.Rate > 0 {
				t.Errorf("refill time moved from %s to %s", quotaWindow(tt.in), quotaWindow(got))
			}
		})
	}
}

func TestScaleLimitRoundsWhenTheFractionDoesNotFit(t *testing.T) {
	in := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 999_999_937, Rate: 3, Interval: time.Second}
	got, err := ScaleLimit(in, 500_000_000) // 1.5 per second; 999,999,937 is prime
	if err != nil {
		t.Fatal(err)
	}
	if got.Interval != in.Interval || got.Rate != 2 {
		t.Fatalf("got %v, want rate 2 per %s", got, in.Interval)
	}
}

func TestNewOverride(t *testing.T) {
	p := mustCompile(t, "cost: 2\nlimits: [{name: burst, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}, {name: day, fixedWindow: {limit: 1000, window: 24h}}]\n")
	o, err := p.NewOverride(OverrideRuntime, map[string]int64{"day": 5000}, time.Time{}, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Limits(); got[0] != p.Limits[0] || got[1].Limit.Capacity != 5000 || got[1].Name != "day" {
		t.Fatalf("limits %+v", got)
	}
	if p.Limits[1].Limit.Capacity != 1000 {
		t.Fatal("the policy's own limits changed")
	}
	if !o.Overrides("day") || o.Overrides("burst") {
		t.Fatal("Overrides names the wrong limits")
	}
	for _, tt := range []struct {
		quotas map[string]int64
		want   string
	}{
		{nil, "at least one limit"},
		{map[string]int64{"hour": 5}, `limit "hour" is not a limit of policy shop/p (its limits: burst, day)`},
		{map[string]int64{"day": 0}, `limit "day": 0 must be from 1 to 1000000000`},
		{map[string]int64{"day": 1}, "below the policy's cost 2"},
	} {
		if _, err := p.NewOverride(OverrideRuntime, tt.quotas, time.Time{}, "", ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.quotas, err, tt.want)
		}
	}
}

func TestOverrideApplies(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var none *Override
	if none.Applies(now) {
		t.Fatal("nil applies")
	}
	if !(&Override{}).Applies(now) {
		t.Fatal("no expiry does not apply")
	}
	o := &Override{Expires: now}
	if o.Applies(now) || !o.Applies(now.Add(-time.Nanosecond)) {
		t.Fatal("an override applies until its expiry, not at it")
	}
}
