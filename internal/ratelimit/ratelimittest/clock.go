package ratelimittest

import (
	"sync/atomic"
	"time"
)

// Clock is a simulated clock with microsecond resolution, safe for
// concurrent use. It only moves when told to.
type Clock struct{ us atomic.Int64 }

// NewClock returns a clock at start, truncated to the microsecond.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.us.Store(start.UnixMicro())
	return c
}

// FutureClock returns a clock a day ahead of the real one, aligned to an
// hour (so epoch-aligned windows start on it). Redis stores driven by it set
// expiry deadlines in simulated time; being ahead of the real clock keeps
// Redis from expiring keys before simulated time says they end.
func FutureClock() *Clock {
	hour := time.Hour.Microseconds()
	us := time.Now().Add(24*time.Hour).UnixMicro()/hour*hour + hour
	c := &Clock{}
	c.us.Store(us)
	return c
}

// Now is the simulated time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Micros is the simulated time in µs since the Unix epoch.
func (c *Clock) Micros() int64 { return c.us.Load() }

// Advance moves the clock forward by d (truncated to the µs).
func (c *Clock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// AlignTo moves the clock forward to the next multiple of d (no move when
// already aligned).
func (c *Clock) AlignTo(d time.Duration) {
	m := d.Microseconds()
	us := c.us.Load()
	if r := us % m; r != 0 {
		c.us.Store(us + m - r)
	}
}
