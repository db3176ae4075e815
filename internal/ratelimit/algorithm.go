package ratelimit

import "fmt"

// Algorithm selects how a Limit counts. The zero value is invalid, so a
// Limit that was never filled in fails validation instead of silently
// meaning one of the algorithms.
type Algorithm uint8

// The six algorithms. Their numeric values are part of the Redis library's
// argument format and of stored state tags: never renumber them.
const (
	// TokenBucket (discrete refills): the bucket starts full with
	// Capacity tokens; every Interval, Rate tokens are added at once, never
	// above Capacity. A full bucket is the same as an untouched one: the
	// refill clock starts with the first token taken from a full bucket.
	TokenBucket Algorithm = 1
	// FixedWindow: at most Capacity units per window of Interval. A window
	// starts with the first admitted request after the previous one ended
	// (as when a counter key's TTL defines the window).
	FixedWindow Algorithm = 2
	// SlidingWindowLog: at most Capacity units in any Interval-long span,
	// exactly, by logging every admitted request.
	SlidingWindowLog Algorithm = 3
	// SlidingWindowCounter: a weighted estimate over two epoch-aligned
	// windows: floor(previous*(1-elapsed/window)) + current + cost <= Capacity.
	SlidingWindowCounter Algorithm = 4
	// LeakyBucket (policing): a level that drains continuously at Rate
	// units per Interval; a request of cost c is admitted when
	// level+c <= Capacity, and denied at once otherwise.
	LeakyBucket Algorithm = 5
	// GCRA: the generic cell rate algorithm, a continuous token bucket:
	// Rate requests per Interval (the period), with Capacity (the burst) the
	// number that may arrive at once.
	GCRA Algorithm = 6
)

// Algorithms lists every valid algorithm, in numeric order.
var Algorithms = []Algorithm{TokenBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, LeakyBucket, GCRA}

var algorithmNames = [...]string{
	TokenBucket:          "TokenBucket",
	FixedWindow:          "FixedWindow",
	SlidingWindowLog:     "SlidingWindowLog",
	SlidingWindowCounter: "SlidingWindowCounter",
	LeakyBucket:          "LeakyBucket",
	GCRA:                 "GCRA",
}

// String returns the name used in the RateLimitPolicy API (e.g. "TokenBucket").
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the six algorithms.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= GCRA }

// ParseAlgorithm is the inverse of String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q", s)
}

// hasRate reports whether the algorithm uses Limit.Rate.
func (a Algorithm) hasRate() bool { return a == TokenBucket || a == LeakyBucket || a == GCRA }
