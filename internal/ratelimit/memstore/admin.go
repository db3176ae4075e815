package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

var (
	_ ratelimit.Resetter = (*Store)(nil)
	_ ratelimit.BanIndex = (*Store)(nil)
)

// shardOf returns the shard that holds bucket.
func (s *Store) shardOf(bucket string) *shard {
	return &s.shards[maphash.String(s.seed, bucket)%uint64(len(s.shards))]
}

// Reset implements ratelimit.Resetter: each entry's limit state reads as
// untouched afterwards (a state of no algorithm is), and the units a
// concurrency limit held are freed.
func (s *Store) Reset(ctx context.Context, entries []ratelimit.Entry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore reset: %w", err)
	}
	for i := range entries {
		bucket, field := ratelimit.SplitKey(entries[i].Key)
		sh := s.shardOf(bucket)
		sh.mu.Lock()
		if it := sh.m[bucket]; it != nil {
			if st := it.state(field); st != nil {
				*st = model.State{}
			}
			if holding := it.holding(s.now().UnixMicro()); holding != it.pinned {
				sh.setOffList(it, it.banned, holding, true)
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Lift implements ratelimit.Resetter.
func (s *Store) Lift(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore lift: %w", err)
	}
	bucket, _ := ratelimit.SplitKey(key)
	sh := s.shardOf(bucket)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if it := sh.m[bucket]; it != nil {
		it.penalty = model.PenaltyState{}
		sh.setOffList(it, 0, it.pinned, true)
	}
	return nil
}

// banIndex is the memory store's ratelimit.BanIndex: per policy, the key
// values banned and their bans, at most one entry per banned bucket.
// Ended bans go when listed or swept (Sweep).
type banIndex struct {
	mu       sync.Mutex
	byPolicy map[string]map[string]ratelimit.Ban
}

func policyName(namespace, policy string) string { return namespace + "/" + policy }

// RecordBan implements ratelimit.BanIndex.
func (s *Store) RecordBan(_ context.Context, namespace, policy string, b ratelimit.Ban) error {
	s.bans.mu.Lock()
	defer s.bans.mu.Unlock()
	if s.bans.byPolicy == nil {
		s.bans.byPolicy = map[string]map[string]ratelimit.Ban{}
	}
	name := policyName(namespace, policy)
	m := s.bans.byPolicy[name]
	if m == nil {
		m = map[string]ratelimit.Ban{}
		s.bans.byPolicy[name] = m
	}
	m[b.KeyValue] = b
	return nil
}

// Bans implements ratelimit.BanIndex.
func (s *Store) Bans(_ context.Context, namespace, policy string, now time.Time) ([]ratelimit.Ban, error) {
	s.bans.mu.Lock()
	defer s.bans.mu.Unlock()
	name := policyName(namespace, policy)
	var out []ratelimit.Ban
	for v, b := range s.bans.byPolicy[name] {
		if !now.Before(b.Until) {
			delete(s.bans.byPolicy[name], v)
			continue
		}
		out = append(out, b)
	}
	if len(s.bans.byPolicy[name]) == 0 {
		delete(s.bans.byPolicy, name)
	}
	slices.SortFunc(out, func(a, b ratelimit.Ban) int { return a.Until.Compare(b.Until) })
	return out, nil
}

// ForgetBan implements ratelimit.BanIndex.
func (s *Store) ForgetBan(_ context.Context, namespace, policy, value string) error {
	s.bans.mu.Lock()
	defer s.bans.mu.Unlock()
	delete(s.bans.byPolicy[policyName(namespace, policy)], value)
	return nil
}

// sweep drops the bans ended by now.
func (x *banIndex) sweep(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for name, m := range x.byPolicy {
		for v, b := range m {
			if !now.Before(b.Until) {
				delete(m, v)
			}
		}
		if len(m) == 0 {
			delete(x.byPolicy, name)
		}
	}
}

// Backend is the store and what it can do: reset and lift, the index of
// bans, evictions.
func (s *Store) Backend() ratelimit.Backend {
	return ratelimit.Backend{Store: s, Resetter: s, BanIndex: s, Evictions: s}
}
