package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

var (
	_ ratelimit.Resetter = (*Store)(nil)
	_ ratelimit.BanIndex = (*Store)(nil)
)

// Mode digits of the library's reset and lift (lua/sluice.lua's forget).
const (
	opReset = '4'
	opLift  = '5'
)

// Reset implements ratelimit.Resetter through the library, one call per
// Cluster slot: the user that resets needs FCALL and the commands the
// library runs, never a command of its own on counter keys.
func (s *Store) Reset(ctx context.Context, entries []ratelimit.Entry) error {
	return s.forget(ctx, entries, opReset)
}

// Lift implements ratelimit.Resetter through the library.
func (s *Store) Lift(ctx context.Context, key string) error {
	return s.forget(ctx, []ratelimit.Entry{{Key: key, Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1, Interval: time.Second}}}, opLift)
}

// forget makes the library's call of op over entries: a refund's request
// (one round, no penalty box) carrying op's mode digit.
func (s *Store) forget(ctx context.Context, entries []ratelimit.Entry, op byte) error {
	req := &ratelimit.Request{Entries: make([]ratelimit.Entry, len(entries)), Action: ratelimit.Refund}
	for i, e := range entries {
		req.Entries[i] = ratelimit.Entry{Key: e.Key, Limit: e.Limit, Holder: "-"} // what the library reads: where the state is
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("redisstore forget: %w", err)
	}
	cs := &checkState{done: make(chan struct{}, 1), op: op}
	cs.deadline, _ = ctx.Deadline()
	s.compile(req, cs)
	return s.round(ctx, req, cs, false)
}

// RecordBan implements ratelimit.BanIndex: one hash per policy, a field
// per key value holding "<until µs>:<length µs>". Each record moves its
// expiry to MaxPenaltyDuration from now, past the end of any ban it holds
// (PEXPIREAT's GT would need Redis 7); listing drops the ended ones.
func (s *Store) RecordBan(ctx context.Context, namespace, policy string, b ratelimit.Ban) error {
	key := ratelimit.BanIndexKey(namespace, policy)
	v := strconv.FormatInt(b.Until.UnixMicro(), 10) + ":" + strconv.FormatInt(b.Length.Microseconds(), 10)
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, b.KeyValue, v)
		p.PExpire(ctx, key, ratelimit.MaxPenaltyDuration)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record ban: %w", err)
	}
	return nil
}

// Bans implements ratelimit.BanIndex; it drops the ended bans it reads.
func (s *Store) Bans(ctx context.Context, namespace, policy string, now time.Time) ([]ratelimit.Ban, error) {
	key := ratelimit.BanIndexKey(namespace, policy)
	all, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("list bans: %w", err)
	}
	var bans []ratelimit.Ban
	var ended []string
	for value, v := range all {
		until, length, ok := parseBan(v)
		if !ok || !now.Before(until) {
			ended = append(ended, value)
			continue
		}
		bans = append(bans, ratelimit.Ban{KeyValue: value, Until: until, Length: length})
	}
	if len(ended) > 0 {
		if err := s.client.HDel(ctx, key, ended...).Err(); err != nil {
			return nil, fmt.Errorf("list bans: %w", err)
		}
	}
	slices.SortFunc(bans, func(a, b ratelimit.Ban) int { return a.Until.Compare(b.Until) })
	return bans, nil
}

// ForgetBan implements ratelimit.BanIndex.
func (s *Store) ForgetBan(ctx context.Context, namespace, policy, value string) error {
	if err := s.client.HDel(ctx, ratelimit.BanIndexKey(namespace, policy), value).Err(); err != nil {
		return fmt.Errorf("forget ban: %w", err)
	}
	return nil
}

// parseBan reads an index entry "<until µs>:<length µs>".
func parseBan(v string) (until time.Time, length time.Duration, ok bool) {
	u, l, found := strings.Cut(v, ":")
	if !found {
		return time.Time{}, 0, false
	}
	us, err1 := strconv.ParseInt(u, 10, 64)
	ls, err2 := strconv.ParseInt(l, 10, 64)
	if err1 != nil || err2 != nil || us < 0 || ls < 0 {
		return time.Time{}, 0, false
	}
	return time.UnixMicro(us), time.Duration(ls) * time.Microsecond, true
}

// Backend is the store and what it can do: reset and lift, the index of
// bans in Redis, and the Cluster's masters as nodes.
func (s *Store) Backend() ratelimit.Backend {
	return ratelimit.Backend{Store: s, Resetter: s, BanIndex: s, Nodes: s}
}
