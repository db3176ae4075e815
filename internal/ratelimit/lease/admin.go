package lease

import (
	"context"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Backend is the wrapped store's Backend with what the lease layer
// changes: its checks, a reset that drops this process's units first,
// the refunds of unused units it makes, and the denials it remembers.
// Lifts, the index of bans and the nodes are the wrapped store's: its
// calls go to those nodes, so a caller's breaker per node sees through.
func (s *Store) Backend() ratelimit.Backend {
	b := s.backend
	b.Store, b.Refunds, b.Denials = s, s, s
	if b.Resetter != nil {
		b.Resetter = resetter{Resetter: b.Resetter, s: s}
	}
	return b
}

// resetter is the wrapped store's, with Reset dropping this process's
// units of the buckets first.
type resetter struct {
	ratelimit.Resetter
	s *Store
}

// Reset implements ratelimit.Resetter: the units this process holds of
// the entries' buckets are dropped (not given back: the buckets start
// afresh), then the wrapped store resets them.
func (r resetter) Reset(ctx context.Context, entries []ratelimit.Entry) error {
	s := r.s
	now := s.now()
	s.mu.RLock()
	for i := range entries {
		name, _ := ratelimit.SplitKey(entries[i].Key)
		if b := s.buckets[name]; b != nil {
			b.mu.Lock()
			b.left = 0
			b.gen++ // units put back belong to no lease now
			b.forget(now)
			b.mu.Unlock()
		}
	}
	s.mu.RUnlock()
	return r.Resetter.Reset(ctx, entries)
}
