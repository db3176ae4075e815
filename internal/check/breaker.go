package check

import (
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState int

const (
	// BreakerClosed: calls go to Redis.
	BreakerClosed BreakerState = iota
	// BreakerOpen: Redis failed repeatedly; calls are answered by the
	// failure mode without trying, except one probe per cooldown.
	BreakerOpen
	// BreakerHalfOpen: one probe call is in flight.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// Breaker stops calls to a store that keeps failing, so that a frozen or
// dead Redis costs each request nothing but the failure-mode answer, and
// Redis sees at most one probe per cooldown until it answers again.
//
// Failures closer together than failureSpacing count once: one lost
// connection fails every request it carried at the same instant (the
// store merges concurrent requests into one command), and that is one
// event, not a Redis that keeps failing.
//
// It is not sony/gobreaker's TwoStepCircuitBreaker, which has the same
// states (one probe: MaxRequests 1) but reads time.Now itself, so the
// cooldown could not follow the checker's injected clock, and whose Allow
// returns a closure, one allocation on every store call of the hot path.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(BreakerState)
	openErr   error // the answer's error while open

	mu          sync.Mutex
	state       BreakerState
	failures    int
	lastFailure time.Time
	openUntil   time.Time
}

// failureSpacing is the least time between two failures that count apart.
const failureSpacing = 5 * time.Millisecond

// NewBreaker opens after threshold consecutive failures and probes once
// every cooldown while open.
func NewBreaker(threshold int, cooldown time.Duration, now func() time.Time, onChange func(BreakerState)) *Breaker {
	if threshold < 1 {
		threshold = 1
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{threshold: threshold, cooldown: cooldown, now: now, onChange: onChange, openErr: errBreakerOpen}
}

// Allow reports whether a call may go to the store now. When it returns
// true in the open state, the call is the probe and must report back with
// Success or Failure.
func (b *Breaker) Allow() bool {
	ok, _ := b.allow()
	return ok
}

// allow is Allow, and reports whether the call is the probe.
func (b *Breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if b.now().Before(b.openUntil) {
			return false, false
		}
		b.setState(BreakerHalfOpen)
		return true, true
	default: // half-open: a probe is already in flight
		return false, false
	}
}

// release gives back the probe that allow granted, unused or with an
// outcome that says nothing of this node: the breaker is open again, its
// cooldown over, so the next call probes.
func (b *Breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.setState(BreakerOpen)
	}
}

// Success records a call that Redis answered.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if b.state != BreakerClosed {
		b.setState(BreakerClosed)
	}
}

// Failure records a call that Redis did not answer in time.
func (b *Breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.state == BreakerClosed && b.failures > 0 && now.Sub(b.lastFailure) < failureSpacing {
		return // the same event as the last counted failure
	}
	b.failures++
	b.lastFailure = now
	if b.state == BreakerHalfOpen || b.failures >= b.threshold {
		b.openUntil = now.Add(b.cooldown)
		if b.state != BreakerOpen {
			b.setState(BreakerOpen)
		}
	}
}

// State returns the current state.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *Breaker) setState(s BreakerState) {
	b.state = s
	if b.onChange != nil {
		b.onChange(s)
	}
}
