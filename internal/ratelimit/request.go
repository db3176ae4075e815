package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Never is the RetryAfter of an entry that can never be admitted: its cost
// exceeds the limit's capacity. It is the largest Duration, so code that
// treats RetryAfter as "wait at least this long" stays correct; compare with
// == Never to render it specially (e.g. omit Retry-After, or cache the
// denial until the policy changes).
const Never = time.Duration(math.MaxInt64)

// MaxEntries bounds the entries of one Request, which bounds the work one
// request can make a store do: 1,024 policies of 8 limits each. A Redis
// store decides such a request in about 30ms of the server's time (one
// bucket of 8 limits costs about 25µs), several calls of at most
// MaxCallEntries each.
const MaxEntries = 8192

// MaxCallEntries bounds the entries one atomic call of the Redis library
// evaluates (the library's own bound): a call holds the server for at
// most a few milliseconds, so other clients' commands run between the
// calls of a larger request. The library checks that a request's buckets
// are distinct in time quadratic in their number, which this keeps small.
const MaxCallEntries = 256

// Entry is one limit to check for a request.
type Entry struct {
	// Key names the limit's state, normally built by Key; it must be
	// distinct within one Request. Entries whose keys share a bucket
	// (SplitKey) are stored in one Redis hash, a field each, and read,
	// written and given their expiry together.
	Key   string
	Limit Limit
	// Cost is how many units the request takes, 0..MaxCount. Cost 0
	// evaluates without consuming; it is allowed unless the state is over
	// its limit (possible only after the limit was lowered or the clock
	// stepped back). A cost above Limit.Capacity is always denied with
	// RetryAfter == Never.
	Cost int64
	// Shadow entries are evaluated and consumed like the others but never
	// deny the request; a shadow entry that would deny consumes nothing.
	Shadow bool
	// ChargeAlways entries are consumed whatever the decision: also when
	// another entry denies the request, and also when the cost does not
	// fit, which takes the limit over (a bucket in debt) so that it denies
	// until time brings it back under. It is for costs known after the
	// fact (the tokens a call used, reported once it is done): they were
	// spent, admitted or not. The debt is capped at one Capacity (a limit
	// is never more than twice full; Limit.ValidateDebt bounds what that
	// takes), and on a dry run nothing is written, as always.
	ChargeAlways bool
	// Holder names who holds the units a Concurrency entry takes: one
	// request in flight (Envoy's x-request-id, a handle the caller keeps).
	// A Concurrency entry needs one (1..MaxHolderLen bytes); a Release,
	// or a Refund, frees only what its holder holds. An entry of another
	// algorithm needs one with Reserve (on a DryRun it may be empty: the
	// call then only reports Reserved) and in a Settle; else it is
	// ignored.
	Holder string
	// Reserve, above 0 on a Consume or a DryRun of an entry of any
	// algorithm but Concurrency, makes the entry's Cost a reservation
	// (a token budget's estimate): the Cost is taken exactly as without
	// it (all or nothing with the request's other entries), and recorded
	// as Holder's reservation in the limit, live for Reserve (at most
	// MaxReserve). A later Settle of the same holder replaces it by the
	// actual cost. An admission of a holder that holds a live reservation
	// in the limit is denied (RetryAfter at the earliest when that
	// reservation ends) and counted as its duplicate, whatever the
	// request's decision (as a Concurrency hold counts its duplicates):
	// the duplicate's settlement, which comes first or last, changes
	// nothing, and only the holder's last one settles. A reservation
	// never settled stays charged: its units were taken at admission,
	// and its record goes after Reserve. A Cost of 0 reserves nothing.
	// Not with ChargeAlways. A Refund or a Release ignores it.
	Reserve time.Duration
	// Lease, when enabled, lets a lease store (package lease) answer the
	// entry from units it took from the bucket earlier; stores ignore it.
	Lease Lease
	// Penalty, when enabled, is the penalty box of the entry's bucket
	// (see Penalty). Not for a refund, which ignores it.
	Penalty Penalty
}

// MaxHolderLen bounds Entry.Holder: a request id or a handle, not a
// payload (the holder is stored beside the units it holds).
const MaxHolderLen = 256

// MaxReserve bounds Entry.Reserve: a reservation's record lives at most
// this long (366 days).
const MaxReserve = 366 * 24 * time.Hour

// Request is the set of limits one incoming request is checked against.
// All entries are evaluated at one instant and the outcome is all or
// nothing: if any non-shadow entry denies, no entry is consumed (except
// those that charge always).
type Request struct {
	Entries []Entry
	// Action is what the call does to the limits' state: consume (the
	// zero Action), a dry run, a refund, a release, or a settlement.
	Action Action
}

// Action is what a Request does to its limits' state.
type Action uint8

const (
	// Consume takes each entry's Cost when the request is allowed.
	Consume Action = iota
	// DryRun evaluates and reports the same Decision a real call would,
	// but writes nothing.
	DryRun
	// Refund returns each entry's Cost to its limit instead of taking it:
	// units taken earlier and not used (a lease's leftovers, Envoy's
	// negative hits). A refund never denies and never goes past untouched
	// (a full bucket, an empty window or log); it changes only state that
	// holds units now, so it gives back at most Cost of each limit's room
	// and never more than taking Cost had cost. Results are the limits'
	// figures after the refund. Shadow and ChargeAlways do not apply.
	// A Concurrency entry is released (as by Release) instead: the
	// units its holder holds, whatever its Cost.
	Refund
	// Release ends a request: each Concurrency entry frees the units its
	// Holder holds in that limit, and a holder that holds nothing (it was
	// denied, released already, or its lease timed out) frees nothing;
	// the entries of other algorithms are refunded, as by Refund (a
	// caller that wants a limit to keep what the request was charged
	// leaves its entry out). A Concurrency entry's Result.Allowed reports
	// whether it freed units (RetryAfter is then 0, else Never: there is
	// nothing to wait for), the Decision's whether any did; the others'
	// are a refund's. Remaining and Reset are the figures after.
	Release
	// Settle replaces reservations (Entry.Reserve) by actual costs: each
	// entry's Cost is the actual cost (0..MaxCount) of its Holder, whose
	// live reservation R in that limit goes, and the limit's state moves
	// by the difference. An actual below R gives R - actual back, as
	// Refund gives back (never past untouched; what belonged to a window
	// that has ended is dropped); one above R takes actual - R whatever
	// the limit says, as ChargeAlways takes (into debt, capped at one
	// Capacity: the limit must pass Limit.ValidateDebt); an actual equal
	// to R moves nothing. A holder with no live reservation there (none
	// taken, its admission denied, settled already, or its reservation
	// ended) changes nothing; while duplicates of the holder's admission
	// are pending (see Entry.Reserve), the settlement is a duplicate's:
	// it counts one off and changes nothing else. Result.Allowed reports
	// whether the entry settled a reservation (RetryAfter is then 0, else
	// Never), Result.Settled the reservation it replaced, the Decision's
	// Allowed whether any entry settled; Remaining, Reset and Reserved
	// are the figures after. Penalty boxes do not apply, nor Shadow and
	// ChargeAlways. A Concurrency entry is released, as by Release.
	Settle
)

// Decides reports whether the action decides an admission (Consume,
// DryRun) rather than giving units back (Refund, Release, Settle): only those meet
// a penalty box's bans and count its denials.
func (a Action) Decides() bool { return a == Consume || a == DryRun }

func (a Action) String() string {
	switch a {
	case Consume:
		return "consume"
	case DryRun:
		return "dry run"
	case Refund:
		return "refund"
	case Release:
		return "release"
	case Settle:
		return "settle"
	}
	return fmt.Sprintf("Action(%d)", a)
}

// Result is the outcome for one Entry. Durations are rounded up to the
// microsecond.
//
// Remaining and Reset describe the state as the call left it: after
// consumption for an entry that was consumed (the decision allowed and the
// entry allowed, or the entry charges always), else unchanged. A dry run
// reports what the same call would have reported for real.
type Result struct {
	// Allowed reports whether this entry admits the request on its own.
	Allowed bool
	// Remaining is how many units of cost 1 the limit would still admit at
	// this instant, after this call (so after consuming, if it consumed).
	Remaining int64
	// Reset is how long until the limit's state is back to untouched
	// (bucket full, window over, log empty); 0 when it already is.
	Reset time.Duration
	// RetryAfter is set when Allowed is false: the earliest moment the
	// same entry would be admitted if nothing else arrived. Never early;
	// Never when the cost exceeds the capacity. 0 when Allowed.
	RetryAfter time.Duration
	// Banned is set when the entry was denied because its bucket is
	// banned (Entry.Penalty): RetryAfter is the ban's end, Remaining 0.
	Banned bool
	// Ban is the length of the ban this call issued to the entry's bucket
	// (on every entry of the bucket); for a shadow entry, of the ban it
	// would have issued. 0 when none.
	Ban time.Duration
	// BanLeft is how long the entry's bucket stays banned from this call
	// on: the ban in force (Banned) or the ban the call issued (Ban), on
	// every entry of the bucket; 0 when none, and for a shadow entry. A
	// denial's RetryAfter is the ban's end or later: its own limit may
	// still deny then.
	BanLeft time.Duration
	// Reserved is the units of the limit's live reservations (see
	// Entry.Reserve) as the call left them: with this entry's own when it
	// was consumed, without the one a Settle replaced. Reported for an
	// entry with Reserve and in a Settle, else 0. Reserved units are
	// spent units (counted in Remaining) until settled.
	Reserved int64
	// Settled is, in a Settle, the reservation the entry replaced (0:
	// none, see Allowed).
	Settled int64
}

// DeniedFor is how long the denial r stands if nothing else happens to
// its bucket: until the ban's end when the bucket is banned (only a lift
// ends a ban earlier; after it the bucket's own limits decide again),
// else until its retry time (which a refund or a release may bring
// earlier). Never for a denial that stands until the policy changes.
func (r *Result) DeniedFor() time.Duration {
	if r.BanLeft > 0 {
		return min(r.BanLeft, r.RetryAfter)
	}
	return r.RetryAfter
}

// Decision is the outcome of a Request.
type Decision struct {
	// Allowed is true when every non-shadow entry admits the request.
	Allowed bool
	// Results is parallel to Request.Entries.
	Results []Result
}

// Store evaluates requests atomically against shared limit state.
type Store interface {
	// Check evaluates req and fills dec, reusing dec.Results' storage. A
	// timeout above 0 bounds the call as a context deadline would, without
	// the context and timer that would cost on every request; a store that
	// does no I/O ignores it. On error dec is unspecified, and for a Redis
	// store it is unknown whether the call was applied.
	Check(ctx context.Context, timeout time.Duration, req *Request, dec *Decision) error
	// Close releases the store's background work. It does not close
	// clients that were passed in.
	Close() error
}

// ErrInvalidRequest is wrapped by every error Validate returns.
var ErrInvalidRequest = errors.New("invalid request")

// ErrCapacity is wrapped by the error of a store that cannot hold the state
// a request needs because it is full: Redis over its maxmemory with nothing
// to evict (OOM), or a request that needs more buckets than the in-memory
// store may hold at all. The store is available (it answered), and nothing
// of the request was applied.
var ErrCapacity = errors.New("store full")

// Validate checks the entries: count, keys (non-empty, distinct), limits
// and costs. Stores call it before evaluating anything.
func (r *Request) Validate() error {
	n := len(r.Entries)
	if n == 0 || n > MaxEntries {
		return fmt.Errorf("%w: %d entries, want 1..%d", ErrInvalidRequest, n, MaxEntries)
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		if e.Key == "" {
			return fmt.Errorf("%w: entry %d has an empty key", ErrInvalidRequest, i)
		}
		if e.Key[len(e.Key)-1] == '}' && tagEnd(e.Key) == len(e.Key) {
			return fmt.Errorf("%w: entry %d's key %s ends with its hash tag: that names a bucket, not a limit", ErrInvalidRequest, i, e.Key)
		}
		if e.Cost < 0 || e.Cost > MaxCount {
			return fmt.Errorf("%w: entry %d (%s) cost %d outside 0..%d", ErrInvalidRequest, i, e.Key, e.Cost, MaxCount)
		}
		if err := e.Limit.Validate(); err != nil {
			return fmt.Errorf("%w: entry %d (%s): %w", ErrInvalidRequest, i, e.Key, err)
		}
		if err := e.Penalty.Validate(); err != nil {
			return fmt.Errorf("%w: entry %d (%s): %w", ErrInvalidRequest, i, e.Key, err)
		}
		if e.Limit.Algorithm == Concurrency && (e.Holder == "" || len(e.Holder) > MaxHolderLen) {
			return fmt.Errorf("%w: entry %d (%s) of a Concurrency limit has a holder of %d bytes, want 1..%d", ErrInvalidRequest, i, e.Key, len(e.Holder), MaxHolderLen)
		}
		if err := r.validateReserve(i, e); err != nil {
			return err
		}
		if e.ChargeAlways || r.Action == Settle && e.Limit.Algorithm != Concurrency {
			if err := e.Limit.ValidateDebt(); err != nil {
				return fmt.Errorf("%w: entry %d (%s): %w", ErrInvalidRequest, i, e.Key, err)
			}
		}
	}
	if i, j, ok := r.duplicate(); ok {
		return fmt.Errorf("%w: entries %d and %d share key %s", ErrInvalidRequest, i, j, r.Entries[j].Key)
	}
	return nil
}

// validateReserve checks entry i's reservation, or its settlement.
func (r *Request) validateReserve(i int, e *Entry) error {
	holder := len(e.Holder) >= 1 && len(e.Holder) <= MaxHolderLen
	if r.Action == Settle {
		if !holder {
			return fmt.Errorf("%w: entry %d (%s) of a settlement has a holder of %d bytes, want 1..%d", ErrInvalidRequest, i, e.Key, len(e.Holder), MaxHolderLen)
		}
		return nil
	}
	if e.Reserve == 0 || !r.Action.Decides() {
		return nil
	}
	switch {
	case e.Reserve < 0 || e.Reserve > MaxReserve:
		return fmt.Errorf("%w: entry %d (%s) reserve %s outside 0..%s", ErrInvalidRequest, i, e.Key, e.Reserve, MaxReserve)
	case e.Reserve < time.Microsecond:
		return fmt.Errorf("%w: entry %d (%s) reserve %s below 1µs", ErrInvalidRequest, i, e.Key, e.Reserve)
	case e.Limit.Algorithm == Concurrency:
		return fmt.Errorf("%w: entry %d (%s): a Concurrency limit holds its units already, it takes no reservation", ErrInvalidRequest, i, e.Key)
	case e.ChargeAlways:
		return fmt.Errorf("%w: entry %d (%s): a reservation is not charged always (its settlement takes what it used)", ErrInvalidRequest, i, e.Key)
	case !holder && (r.Action != DryRun || e.Holder != ""):
		return fmt.Errorf("%w: entry %d (%s) with a reservation has a holder of %d bytes, want 1..%d", ErrInvalidRequest, i, e.Key, len(e.Holder), MaxHolderLen)
	}
	return nil
}

// duplicate finds two entries with the same key.
func (r *Request) duplicate() (int, int, bool) {
	// Requests are small (a few limits): below 32 entries the quadratic
	// scan costs less than a map.
	if len(r.Entries) <= 32 {
		for j := range r.Entries {
			for i := 0; i < j; i++ {
				if r.Entries[i].Key == r.Entries[j].Key {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	seen := make(map[string]int, len(r.Entries))
	for j := range r.Entries {
		if i, ok := seen[r.Entries[j].Key]; ok {
			return i, j, true
		}
		seen[r.Entries[j].Key] = j
	}
	return 0, 0, false
}

// MicrosToDuration converts engine microseconds to a Duration; negative
// values (the engine's "never") become Never.
func MicrosToDuration(us int64) time.Duration {
	if us < 0 || us > math.MaxInt64/int64(time.Microsecond) {
		return Never
	}
	return time.Duration(us) * time.Microsecond
}
