package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Bounds of a Limit. They keep every intermediate value of every algorithm
// an integer below 2^53, so the Lua library (IEEE doubles) and the Go model
// (int64) compute the same numbers exactly.
const (
	// MaxCount bounds Capacity, Rate and Entry.Cost.
	MaxCount = 1_000_000_000
	// MaxInterval bounds Limit.Interval (about ten years).
	MaxInterval = 3650 * 24 * time.Hour
	// MaxUnits bounds the products the bucket algorithms keep in state,
	// in microseconds (2^52 µs is about 142 years); see Limit.Validate.
	MaxUnits int64 = 1 << 52
)

// Limit is one algorithm with its parameters. Per algorithm:
//
//	TokenBucket          Capacity = capacity, Rate = refillRate, Interval = refillInterval
//	FixedWindow          Capacity = limit, Interval = window
//	FixedWindowClock     Capacity = limit, Interval = window
//	SlidingWindowLog     Capacity = limit, Interval = window
//	SlidingWindowCounter Capacity = limit, Interval = window
//	LeakyBucket          Capacity = capacity, Rate = leakRate, Interval = leakInterval
//	GCRA                 Capacity = burst, Rate = rate, Interval = period
//	Calendar             Capacity = limit, Period, Zone (CalendarLimit fills them)
//	Concurrency          Capacity = limit, Interval = leaseTimeout
//
// Rate is unused by the window algorithms and Concurrency, and must be 0
// there. A Calendar limit's Interval is its Period's nominal length
// (Period.Nominal), which names the quota's span in headers; its windows
// follow the calendar. Period and Zone are a Calendar limit's only.
type Limit struct {
	Algorithm Algorithm
	// Capacity is the most units the limit admits at once (bucket size,
	// window limit or burst); 1..MaxCount.
	Capacity int64
	// Rate is how many units come back per Interval; 1..MaxCount.
	Rate int64
	// Interval is the refill interval, window or period: a whole number of
	// microseconds in 1µs..MaxInterval.
	Interval time.Duration
	// Period is a Calendar limit's calendar unit.
	Period Period
	// Zone is the IANA time zone a Calendar limit's windows start in
	// (LoadZone); nil for the other algorithms.
	Zone *time.Location
}

// ErrInvalidLimit is wrapped by every validation error of a Limit or Entry.
var ErrInvalidLimit = errors.New("invalid limit")

// Validate checks the bounds. Beyond the per-field ranges it rejects two
// products that the exact integer arithmetic needs bounded:
//
//   - TokenBucket: ceil(Capacity/Rate)*Interval, the time to refill an empty
//     bucket, at most MaxUnits µs;
//   - LeakyBucket and GCRA: Capacity*Interval/gcd(Interval, Rate), the
//     bucket size in the scaled units the level is counted in, at most
//     MaxUnits. (10^6 per hour with a burst of 10^6 fits; so does any
//     rate that divides its period evenly up to bursts of 10^9 over a day.)
func (l Limit) Validate() error {
	if !l.Algorithm.Valid() {
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, uint8(l.Algorithm))
	}
	if l.Capacity < 1 || l.Capacity > MaxCount {
		return fmt.Errorf("%w: %s capacity %d outside 1..%d", ErrInvalidLimit, l.Algorithm, l.Capacity, MaxCount)
	}
	if l.Algorithm == Calendar {
		return l.validateCalendar()
	}
	if l.Period != 0 || l.Zone != nil {
		return fmt.Errorf("%w: %s takes no period or time zone", ErrInvalidLimit, l.Algorithm)
	}
	if l.Interval < time.Microsecond || l.Interval > MaxInterval {
		return fmt.Errorf("%w: %s interval %s outside 1µs..%s", ErrInvalidLimit, l.Algorithm, l.Interval, MaxInterval)
	}
	if l.Interval%time.Microsecond != 0 {
		return fmt.Errorf("%w: %s interval %s is not a whole number of microseconds", ErrInvalidLimit, l.Algorithm, l.Interval)
	}
	if !l.Algorithm.hasRate() {
		if l.Rate != 0 {
			return fmt.Errorf("%w: %s takes no rate (got %d)", ErrInvalidLimit, l.Algorithm, l.Rate)
		}
		return nil
	}
	if l.Rate < 1 || l.Rate > MaxCount {
		return fmt.Errorf("%w: %s rate %d outside 1..%d", ErrInvalidLimit, l.Algorithm, l.Rate, MaxCount)
	}
	iv := l.IntervalMicros()
	switch l.Algorithm {
	case TokenBucket:
		refills := (l.Capacity + l.Rate - 1) / l.Rate
		if refills > MaxUnits/iv {
			return fmt.Errorf("%w: TokenBucket refills from empty in %d×%s, more than 2^52µs", ErrInvalidLimit, refills, l.Interval)
		}
	default:
		if l.Capacity > MaxUnits/(iv/gcd(iv, l.Rate)) {
			return fmt.Errorf("%w: %s capacity %d × interval %s / gcd(interval µs, rate %d) exceeds 2^52", ErrInvalidLimit, l.Algorithm, l.Capacity, l.Interval, l.Rate)
		}
	}
	return nil
}

// validateCalendar checks a Calendar limit's own fields: a period, a zone,
// the period's nominal length as the Interval, and no rate.
func (l Limit) validateCalendar() error {
	switch {
	case !l.Period.Valid():
		return fmt.Errorf("%w: Calendar period %s", ErrInvalidLimit, l.Period)
	case l.Zone == nil:
		return fmt.Errorf("%w: Calendar has no time zone", ErrInvalidLimit)
	case l.Interval != l.Period.Nominal():
		return fmt.Errorf("%w: Calendar interval %s is not its period's nominal %s", ErrInvalidLimit, l.Interval, l.Period.Nominal())
	case l.Rate != 0:
		return fmt.Errorf("%w: Calendar takes no rate (got %d)", ErrInvalidLimit, l.Rate)
	}
	return nil
}

// ValidateDebt checks, for a limit that passed Validate, that it can also
// be charged always (Entry.ChargeAlways): the bucket algorithms' products
// stay below MaxUnits with the state up to one Capacity in debt, that is
// with twice the Capacity (refilling from Capacity below empty, or a level
// of twice the bucket). The window algorithms count up to 2*Capacity,
// which always fits.
func (l Limit) ValidateDebt() error {
	if l.Algorithm == Concurrency {
		return fmt.Errorf("%w: Concurrency cannot be charged always: it holds units in flight, which a request that was never admitted does not have", ErrInvalidLimit)
	}
	if !l.Algorithm.hasRate() {
		return nil
	}
	iv := l.IntervalMicros()
	switch l.Algorithm {
	case TokenBucket:
		refills := (2*l.Capacity + l.Rate - 1) / l.Rate
		if refills > MaxUnits/iv {
			return fmt.Errorf("%w: TokenBucket charged always refills from a capacity in debt in %d×%s, more than 2^52µs", ErrInvalidLimit, refills, l.Interval)
		}
	default:
		if 2*l.Capacity > MaxUnits/(iv/gcd(iv, l.Rate)) {
			return fmt.Errorf("%w: %s charged always: 2 × capacity %d × interval %s / gcd(interval µs, rate %d) exceeds 2^52", ErrInvalidLimit, l.Algorithm, l.Capacity, l.Interval, l.Rate)
		}
	}
	return nil
}

// IntervalMicros is Interval in whole microseconds.
func (l Limit) IntervalMicros() int64 { return int64(l.Interval / time.Microsecond) }

// String renders the limit for logs and errors, e.g. "TokenBucket{capacity=10 rate=1 interval=1s}".
func (l Limit) String() string {
	if l.Algorithm == Concurrency {
		return fmt.Sprintf("%s{limit=%d leaseTimeout=%s}", l.Algorithm, l.Capacity, l.Interval)
	}
	if l.Algorithm.hasRate() {
		return fmt.Sprintf("%s{capacity=%d rate=%d interval=%s}", l.Algorithm, l.Capacity, l.Rate, l.Interval)
	}
	if l.Algorithm == Calendar {
		return fmt.Sprintf("%s{limit=%d period=%s zone=%s}", l.Algorithm, l.Capacity, l.Period, l.Zone)
	}
	return fmt.Sprintf("%s{limit=%d window=%s}", l.Algorithm, l.Capacity, l.Interval)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
