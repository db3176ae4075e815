package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Reset implements ratelimit.Resetter: the units this process holds of
// the entries' buckets are dropped (not given back: the buckets start
// afresh), then the wrapped store resets them.
func (s *Store) Reset(ctx context.Context, entries []ratelimit.Entry) error {
	r, ok := s.inner.(ratelimit.Resetter)
	if !ok {
		return fmt.Errorf("lease reset: the wrapped store cannot reset")
	}
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
	return r.Reset(ctx, entries)
}

// Lift implements ratelimit.Resetter. A leased policy has no penalty box:
// the wrapped store lifts.
func (s *Store) Lift(ctx context.Context, key string) error {
	r, ok := s.inner.(ratelimit.Resetter)
	if !ok {
		return fmt.Errorf("lease lift: the wrapped store cannot lift")
	}
	return r.Lift(ctx, key)
}

// RecordBan implements ratelimit.BanIndex through the wrapped store.
func (s *Store) RecordBan(ctx context.Context, namespace, policy string, b ratelimit.Ban) error {
	x, ok := s.inner.(ratelimit.BanIndex)
	if !ok {
		return fmt.Errorf("lease: the wrapped store keeps no index of bans")
	}
	return x.RecordBan(ctx, namespace, policy, b)
}

// Bans implements ratelimit.BanIndex through the wrapped store.
func (s *Store) Bans(ctx context.Context, namespace, policy string, now time.Time) ([]ratelimit.Ban, error) {
	x, ok := s.inner.(ratelimit.BanIndex)
	if !ok {
		return nil, fmt.Errorf("lease: the wrapped store keeps no index of bans")
	}
	return x.Bans(ctx, namespace, policy, now)
}

// ForgetBan implements ratelimit.BanIndex through the wrapped store.
func (s *Store) ForgetBan(ctx context.Context, namespace, policy, value string) error {
	x, ok := s.inner.(ratelimit.BanIndex)
	if !ok {
		return fmt.Errorf("lease: the wrapped store keeps no index of bans")
	}
	return x.ForgetBan(ctx, namespace, policy, value)
}
