package ratelimit

import (
	"errors"
	"testing"
	"time"
)

func TestLimitValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Limit
		ok   bool
	}{
		{"token bucket", lim(TokenBucket, 10, 1, time.Second), true},
		{"fixed window", lim(FixedWindow, 10, 0, time.Minute), true},
		{"clock-aligned fixed window", lim(FixedWindowClock, 10, 0, 24*time.Hour), true},
		{"rate on a clock-aligned window", lim(FixedWindowClock, 10, 1, time.Hour), false},
		{"longest clock-aligned window", lim(FixedWindowClock, MaxCount, 0, MaxInterval), true},
		{"gcra", lim(GCRA, 5, 10, time.Second), true},
		{"concurrency", lim(Concurrency, 2, 0, 30*time.Second), true},
		{"rate on concurrency", lim(Concurrency, 2, 1, 30*time.Second), false},
		{"zero", Limit{}, false},
		{"unknown algorithm", lim(Algorithm(11), 10, 1, time.Second), false},
		{"capacity 0", lim(TokenBucket, 0, 1, time.Second), false},
		{"capacity too big", lim(FixedWindow, MaxCount+1, 0, time.Second), false},
		{"rate 0", lim(LeakyBucket, 10, 0, time.Second), false},
		{"rate on a window", lim(SlidingWindowLog, 10, 1, time.Second), false},
		{"sub-µs interval", lim(FixedWindow, 10, 0, 1500*time.Nanosecond), false},
		{"interval 0", lim(FixedWindow, 10, 0, 0), false},
		{"interval too long", lim(FixedWindow, 10, 0, MaxInterval+time.Microsecond), false},
		{"longest interval", lim(SlidingWindowCounter, MaxCount, 0, MaxInterval), true},
		// ceil(1e9/1) refills × 4503599µs = 4.5e15 > 2^52.
		{"token bucket refill too slow", lim(TokenBucket, MaxCount, 1, 4503600*time.Microsecond), false},
		{"token bucket refill at bound", lim(TokenBucket, MaxCount, 1, 4503599*time.Microsecond), true},
		// The gcd reduction: 1e6 per day with a burst of 1e9 fits, 7 per day does not.
		{"gcra reduced", lim(GCRA, MaxCount, 1_000_000, 24*time.Hour), true},
		{"gcra unreduced", lim(GCRA, MaxCount, 7, 24*time.Hour), false},
		{"leaky 1e6/h burst 1e6", lim(LeakyBucket, 1_000_000, 1_000_000, time.Hour), true},
		{"calendar", CalendarLimit(10, Month, time.UTC), true},
		{"calendar without zone", CalendarLimit(10, Day, nil), false},
		{"calendar without period", CalendarLimit(10, 0, time.UTC), false},
		{"calendar interval not nominal", Limit{Algorithm: Calendar, Capacity: 10, Interval: time.Hour, Period: Day, Zone: time.UTC}, false},
		{"calendar with rate", Limit{Algorithm: Calendar, Capacity: 10, Rate: 1, Interval: 24 * time.Hour, Period: Day, Zone: time.UTC}, false},
		{"period on a fixed window", Limit{Algorithm: FixedWindow, Capacity: 10, Interval: 24 * time.Hour, Period: Day}, false},
		{"zone on a fixed window", Limit{Algorithm: FixedWindow, Capacity: 10, Interval: 24 * time.Hour, Zone: time.UTC}, false},
	} {
		err := c.l.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: %v: err %v", c.name, c.l, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: error %v does not wrap ErrInvalidLimit", c.name, err)
		}
	}
}

// lim is a Limit of the four fields every algorithm but Calendar has.
func lim(a Algorithm, capacity, rate int64, interval time.Duration) Limit {
	return Limit{Algorithm: a, Capacity: capacity, Rate: rate, Interval: interval}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range Algorithms {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("Leaky"); err == nil {
		t.Error("unknown name parsed")
	}
	if Algorithm(0).Valid() || Algorithm(200).String() != "Algorithm(200)" {
		t.Error("invalid algorithms")
	}
}

func TestMicrosToDuration(t *testing.T) {
	if MicrosToDuration(-1) != Never || MicrosToDuration(1) != time.Microsecond || MicrosToDuration(1<<62) != Never {
		t.Fatal("MicrosToDuration")
	}
}
