package ratelimittest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

var intervals = []time.Duration{
	time.Microsecond, 3 * time.Microsecond, 997 * time.Microsecond, time.Millisecond,
	7 * time.Millisecond, 100 * time.Millisecond, time.Second, 13 * time.Second, time.Minute,
}

// RandomLimit returns a valid Limit of alg with small, varied parameters
// (so that refills, window ends and drains happen within a few steps),
// including the degenerate ones: capacity 1, 1µs intervals, rates above the
// capacity, rates that do not divide the interval.
func RandomLimit(rng *rand.Rand, alg ratelimit.Algorithm) ratelimit.Limit {
	if rng.IntN(12) == 0 {
		return extremeLimit(rng, alg)
	}
	l := ratelimit.Limit{Algorithm: alg}
	if alg == ratelimit.Calendar {
		l = RandomCalendar(rng)
	}
	switch rng.IntN(10) {
	case 0:
		l.Capacity = 1
	case 1:
		l.Capacity = 1 + rng.Int64N(1000)
	default:
		l.Capacity = 1 + rng.Int64N(20)
	}
	switch alg {
	case ratelimit.Calendar:
	case ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.GCRA:
		l.Interval = randomInterval(rng)
		l.Rate = 1 + rng.Int64N(l.Capacity+3)
	default:
		l.Interval = randomInterval(rng)
	}
	if err := l.Validate(); err != nil {
		panic(err) // the ranges above are always valid
	}
	return l
}

func randomInterval(rng *rand.Rand) time.Duration {
	if rng.IntN(3) == 0 {
		return time.Duration(1+rng.Int64N(2_000_000)) * time.Microsecond
	}
	return intervals[rng.IntN(len(intervals))]
}

// CalendarZones are zones whose calendars differ: daylight saving time
// (Berlin, New York, Lord Howe's by 30 minutes), a 45-minute offset
// (Kathmandu; Chatham has both) and none (UTC).
var CalendarZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Pacific/Chatham", "Australia/Lord_Howe"}

// RandomCalendar is a Calendar limit of capacity 1 with a random period
// and zone (CalendarZones).
func RandomCalendar(rng *rand.Rand) ratelimit.Limit {
	zone, err := ratelimit.LoadZone(CalendarZones[rng.IntN(len(CalendarZones))])
	if err != nil {
		panic(err) // the zone data is compiled in
	}
	return ratelimit.CalendarLimit(1, ratelimit.Periods[rng.IntN(len(ratelimit.Periods))], zone)
}

// RandomPenalty returns a penalty box of short spans, so that a timeline
// sees bans issued, doubled, capped and over.
func RandomPenalty(rng *rand.Rand) ratelimit.Penalty {
	ms := func(n int) time.Duration { return time.Duration(1+rng.IntN(n)) * time.Millisecond }
	p := ratelimit.Penalty{Denials: int64(1 + rng.IntN(4)), Within: ms(5000), Ban: ms(2000)}
	p.MaxBan = p.Ban * time.Duration(1+rng.IntN(20))
	return p
}

// RandomCost is mostly 1, sometimes 0, sometimes up to the capacity, rarely
// above it (never above MaxCount, the most a valid Entry may cost).
func RandomCost(rng *rand.Rand, l ratelimit.Limit) int64 {
	switch n := rng.IntN(20); {
	case n < 11:
		return 1
	case n < 13:
		return 0
	case n < 19:
		return 1 + rng.Int64N(l.Capacity)
	default:
		return min(l.Capacity+1+rng.Int64N(3), ratelimit.MaxCount)
	}
}

// RandomAdvance picks a clock step for a timeline whose limits have the
// given interval: often 0, often within the interval, sometimes across
// several, sometimes exactly at (or 1µs around) hint, a RetryAfter or Reset
// just seen, to land on boundaries, and rarely backwards (a Redis failover
// to a node whose clock is behind).
func RandomAdvance(rng *rand.Rand, interval, hint time.Duration) time.Duration {
	iv := interval.Microseconds()
	if rng.IntN(50) == 0 {
		return -time.Duration(1+rng.Int64N(iv)) * time.Microsecond
	}
	switch n := rng.IntN(20); {
	case n < 5:
		return 0
	case n < 7:
		return time.Duration(1+rng.Int64N(10)) * time.Microsecond
	case n < 13:
		return time.Duration(rng.Int64N(iv+1)) * time.Microsecond
	case n < 16:
		return time.Duration(rng.Int64N(3*iv+1)) * time.Microsecond
	case hint > 0 && hint != ratelimit.Never:
		return max(hint+time.Duration(rng.IntN(3)-1)*time.Microsecond, 0)
	}
	return time.Duration(rng.Int64N(iv+1)) * time.Microsecond
}

// extremeLimit has parameters at or near the bounds of Limit.Validate, where
// the Lua library's doubles would first lose exactness.
func extremeLimit(rng *rand.Rand, alg ratelimit.Algorithm) ratelimit.Limit {
	l := ratelimit.Limit{Algorithm: alg}
	if alg == ratelimit.Calendar {
		l = RandomCalendar(rng)
	}
	l.Capacity = ratelimit.MaxCount - rng.Int64N(1000)
	switch alg {
	case ratelimit.Calendar:
	case ratelimit.TokenBucket:
		l.Rate = 1 + rng.Int64N(3)
		refills := (l.Capacity + l.Rate - 1) / l.Rate
		l.Interval = time.Duration(ratelimit.MaxUnits/refills) * time.Microsecond
	case ratelimit.LeakyBucket, ratelimit.GCRA:
		l.Rate = 1 + rng.Int64N(ratelimit.MaxCount) // rarely shares a factor with the interval
		l.Interval = time.Duration(ratelimit.MaxUnits/l.Capacity) * time.Microsecond
		if l.Validate() != nil {
			l.Rate = 1
		}
	default:
		l.Interval = ratelimit.MaxInterval - time.Duration(rng.Int64N(1000))*time.Microsecond
	}
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}

// Seed returns def, or the value of SLUICE_TEST_SEED when set, so a soak
// run can explore other timelines (go test with SLUICE_TEST_SEED=$RANDOM);
// the seed in use is logged for reproduction.
func Seed(t testing.TB, def uint64) uint64 {
	if s := os.Getenv("SLUICE_TEST_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_TEST_SEED: %v", err)
		}
		t.Logf("seed %d", n)
		return n
	}
	return def
}
