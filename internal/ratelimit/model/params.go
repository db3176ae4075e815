package model

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Params is a Limit compiled to the integer form the algorithms and the Lua
// library take (the Lua argument list carries exactly these four values;
// a Calendar limit's carries its window boundaries in place of the rate
// and interval: see CalendarWindows).
type Params struct {
	Alg ratelimit.Algorithm
	// Capacity is the bucket size, window limit or burst.
	Capacity int64
	// Rate is refillRate, leakRate or rate; 0 for the window algorithms.
	// For LeakyBucket and GCRA it is divided by gcd(Interval, Rate).
	Rate int64
	// Interval is the refill interval, window or period in µs. For
	// LeakyBucket and GCRA it is divided by gcd(Interval, Rate): only the
	// ratio matters there, and the smaller numbers keep the scaled level
	// (Capacity*Interval at most) below 2^52.
	Interval int64
	// Period and Zone are a Calendar limit's.
	Period ratelimit.Period
	Zone   *time.Location
}

// Compile validates l and converts it to Params.
func Compile(l ratelimit.Limit) (Params, error) {
	if err := l.Validate(); err != nil {
		return Params{}, fmt.Errorf("compile limit: %w", err)
	}
	return CompileValid(l), nil
}

// CompileValid is Compile for a Limit that already passed Validate (as
// every entry of a Request that passed Request.Validate has); it skips the
// second validation on the hot path.
func CompileValid(l ratelimit.Limit) Params {
	p := Params{Alg: l.Algorithm, Capacity: l.Capacity, Rate: l.Rate, Interval: l.IntervalMicros(), Period: l.Period, Zone: l.Zone}
	if p.Alg == ratelimit.LeakyBucket || p.Alg == ratelimit.GCRA {
		g := gcd(p.Interval, p.Rate)
		p.Interval /= g
		p.Rate /= g
	}
	return p
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
