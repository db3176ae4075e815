package ratelimit

import "fmt"

// Algorithm selects how a Limit counts. The zero value is invalid, so a
// Limit that was never filled in fails validation instead of silently
// meaning one of the algorithms.
type Algorithm uint8

// The algorithms. Their numeric values are part of the Redis library's
// argument format and of stored state tags: never renumber them.
const (
	// TokenBucket (discrete refills): the bucket starts full with
	// Capacity tokens; every Interval, Rate tokens are added at once, never
	// above Capacity. A full bucket is the same as an untouched one: the
	// refill clock starts with the first token taken from a full bucket.
	TokenBucket Algorithm = 1
	// FixedWindow: at most Capacity units per window of Interval. A window
	// starts with the first admitted request after the previous one ended
	// (as when a counter key's TTL defines the window). FixedWindowClock
	// is the same count over clock-aligned windows.
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
	// FixedWindowClock: at most Capacity units per window of Interval, the
	// windows being whole multiples of Interval since the Unix epoch (a 1h
	// window starts on the hour, 24h at 00:00 UTC), the same for every key,
	// as envoyproxy/ratelimit counts. The API spells it fixedWindow with
	// alignment Clock.
	FixedWindowClock Algorithm = 7
	// Calendar: at most Capacity units per calendar Period (a day from
	// local midnight, an ISO week from Monday, a month from the 1st, a
	// year from 1 January) in the IANA Zone, as long as the calendar has
	// it there (23 or 25 hours on a daylight saving time change, months
	// of 28 to 31 days). The state is the count and the window's end;
	// see CalendarWindows for where the zone's rules are applied.
	Calendar Algorithm = 8
	// Concurrency counts what is in flight rather than what arrived: a
	// request holds its cost from admission until its holder
	// (Entry.Holder) releases it (Release), or until Interval (the lease
	// timeout) has passed since its admission, whichever comes first. A
	// cost fits when what is held plus it is at most Capacity, and when
	// its holder holds nothing in the limit yet: a holder takes units
	// once. The API spells it concurrency {limit, leaseTimeout, holder}.
	Concurrency Algorithm = 9
)

// Algorithms lists every valid algorithm, in numeric order.
var Algorithms = []Algorithm{TokenBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, LeakyBucket, GCRA, FixedWindowClock, Calendar, Concurrency}

var algorithmNames = [...]string{
	TokenBucket:          "TokenBucket",
	FixedWindow:          "FixedWindow",
	SlidingWindowLog:     "SlidingWindowLog",
	SlidingWindowCounter: "SlidingWindowCounter",
	LeakyBucket:          "LeakyBucket",
	GCRA:                 "GCRA",
	FixedWindowClock:     "FixedWindowClock",
	Calendar:             "Calendar",
	Concurrency:          "Concurrency",
}

// String returns the algorithm's name (e.g. "TokenBucket"): the name of its
// field in the RateLimitPolicy API, capitalized, except FixedWindowClock
// (fixedWindow with alignment Clock).
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the algorithms.
func (a Algorithm) Valid() bool { return int(a) < len(algorithmNames) && algorithmNames[a] != "" }

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
