package overrides

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Tracker keeps an Index equal to a RedisStore: it is the overrides'
// handler of a fleet.Follower, which hands it the messages of RedisChannel
// and polls it. A message whose revision follows the last one seen names
// the one policy that changed; any other gap, and the poll finding the
// revision moved, reload everything. A change whose reload failed is not
// seen: the next poll finds the revision moved and reloads.
type Tracker struct {
	store *RedisStore
	// changed reloads one policy's overrides, all every policy's.
	changed func(context.Context, PolicyID) error
	all     func(context.Context) error
	// seen is the revision of the last change applied (-1: none yet);
	// subscribed, whether a subscription was made before.
	seen       int64
	subscribed bool
}

// NewTracker returns a Tracker that keeps x equal to s.
func NewTracker(x *Index, s *RedisStore) *Tracker {
	return &Tracker{
		store: s,
		changed: func(ctx context.Context, id PolicyID) error {
			return bounded(ctx, func(ctx context.Context) error { return x.reload(ctx, s, id) })
		},
		all: func(ctx context.Context) error {
			return bounded(ctx, func(ctx context.Context) error { return x.reloadAll(ctx, s) })
		},
		seen: -1,
	}
}

// Message applies a change message ("<revision> <namespace>/<policy>").
func (t *Tracker) Message(ctx context.Context, payload string) {
	revs, id, _ := strings.Cut(payload, " ")
	rev, err := strconv.ParseInt(revs, 10, 64)
	ns, name, ok := strings.Cut(id, "/")
	if err != nil || !ok || rev != t.seen+1 {
		t.reload(ctx)
		return
	}
	if t.changed(ctx, PolicyID{ns, name}) == nil {
		t.seen = rev
	}
}

// Poll reloads everything when the revision moved.
func (t *Tracker) Poll(ctx context.Context) {
	if rev, err := t.revision(ctx); err == nil && rev != t.seen {
		t.reload(ctx)
	}
}

// revision reads the store's revision within revisionTimeout: the
// follower's loop serves the table too, and a Redis that does not answer
// must not hold it longer than the table's reader would be held.
func (t *Tracker) revision(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, revisionTimeout)
	defer cancel()
	return t.store.revision(ctx)
}

// revisionTimeout bounds a read of the revision.
const revisionTimeout = 2 * time.Second

// loadTimeout bounds a load of overrides. The follower's one loop also
// carries the table's changes and the other processes' refunds and lifts,
// so a Redis that answers slowly must not hold it for a client's retries;
// a load cut short is tried again at the next poll.
const loadTimeout = 10 * time.Second

// bounded runs load within loadTimeout.
func bounded(ctx context.Context, load func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	return load(ctx)
}

// Subscribed reloads everything after a reconnection: the revision is a
// counter that starts again after Redis lost its data, so an equal one
// may hide changes whose messages were lost. The first subscription
// follows the first poll's load: a poll covers the moment between them.
func (t *Tracker) Subscribed(ctx context.Context) {
	if !t.subscribed {
		t.subscribed = true
		t.Poll(ctx)
		return
	}
	t.reload(ctx)
}

// reload reloads everything, and sees the revision read before.
func (t *Tracker) reload(ctx context.Context) {
	rev, err := t.revision(ctx)
	if err != nil {
		return // the next poll tries again
	}
	if t.all(ctx) == nil {
		t.seen = rev
	}
}
