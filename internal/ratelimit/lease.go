package ratelimit

import "time"

// Lease lets a check process take Units of an entry's bucket from the store
// at once and decide further requests from memory until they are used up
// or TTL has passed (package lease). Zero: the entry is decided by the
// store, exactly. The stores themselves ignore it.
type Lease struct {
	// Units is how many units a lease takes from each limit of the bucket:
	// at least the entry's cost, at most its limit's capacity.
	Units int64
	// TTL is how long a process keeps a lease's units; those unused then
	// are given back.
	TTL time.Duration
}

// Enabled reports whether the entry is leased.
func (l Lease) Enabled() bool { return l.Units > 0 }
