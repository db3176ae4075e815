package ratelimit

// Backend is a Store and what it can do besides checking, stated once
// where the check stack is assembled (each store's Backend method) rather
// than discovered by type assertion: a nil capability means the store
// cannot. A wrapper (the lease layer, the tracing of store calls) copies
// the Backend it wraps and replaces only what it changes.
type Backend struct {
	// Store checks requests and closes the store; never nil.
	Store Store
	// Resetter resets buckets and lifts bans (the admin API).
	Resetter Resetter
	// BanIndex records and lists the bans in force.
	BanIndex BanIndex
	// Nodes names the servers keys live on (the masters of a Redis
	// Cluster); nil: the store is one node.
	Nodes Nodes
	// Refunds tells of refunds the store makes of its own, in the
	// background (the lease layer gives back unused units).
	Refunds RefundNotifier
	// Denials is the store's own memory of denials (the lease layer's),
	// which a refund or a lift must clear too.
	Denials DenialKeeper
	// Evictions counts the buckets the store evicted to make room (the
	// in-memory store's cap).
	Evictions Evictor
}

// RefundNotifier is a store that gives units back of its own (a lease's
// unused units): f is told the keys of each refund once sent, valid only
// during the call.
type RefundNotifier interface {
	NotifyRefunds(f func(keys []string))
}

// DenialKeeper is a store that remembers denials of its own, which its
// caller has it forget when their buckets get room (a refund, a lift).
type DenialKeeper interface {
	// ForgetDenials drops the denials remembered of the buckets of keys.
	ForgetDenials(keys []string)
	// ForgetAllDenials is ForgetDenials for every bucket.
	ForgetAllDenials()
}

// Evictor is a store that evicts state to make room.
type Evictor interface {
	// Evictions is the buckets with live state evicted so far.
	Evictions() uint64
}
