package overrides

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis names of the overrides (one Cluster slot, thanks to the hash tag):
//
//	sluice:{overrides}:runtime:<namespace>/<policy>   hash: key value -> JSON Entry
//	sluice:{overrides}:declared:<namespace>/<policy>  hash: key value -> JSON Entry
//	sluice:{overrides}:policies                       set: the policies with overrides
//	sluice:{overrides}:revision                       counter, bumped by every change
//	sluice:overrides:changed                          pub/sub: "<revision> <namespace>/<policy>"
const (
	redisPrefix      = "sluice:{overrides}:"
	RedisPoliciesKey = redisPrefix + "policies"
	RedisRevisionKey = redisPrefix + "revision"
	RedisChannel     = "sluice:overrides:changed"
)

// RedisHashKeys are the hashes of id's run-time and declared overrides.
func RedisHashKeys(id PolicyID) (runtime, declared string) {
	return redisPrefix + "runtime:" + id.String(), redisPrefix + "declared:" + id.String()
}

// RedisStore is a Store in Redis: every process reads the same overrides,
// and a change reaches each within a second (pub/sub, with a poll of the
// revision for the messages a reconnection loses).
type RedisStore struct {
	client redis.UniversalClient
	// poll is how often Follow reads the revision (default 500ms).
	poll time.Duration
}

// NewRedisStore returns a RedisStore over client, whose followers poll
// the revision every poll (default 500ms).
func NewRedisStore(client redis.UniversalClient, poll time.Duration) *RedisStore {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	return &RedisStore{client: client, poll: poll}
}

// Every script takes KEYS: the runtime hash, the declared hash, the
// policies set, the revision; ARGV: the channel, the policy's ID, then its
// own. changeEnd keeps the set of policies with overrides, bumps the
// revision and announces the change.
const changeEnd = `
if redis.call('HLEN', KEYS[1]) + redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[2])
else
  redis.call('SADD', KEYS[3], ARGV[2])
end
local rev = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[1], rev .. ' ' .. ARGV[2])
return rev
`

// putScript: ARGV key, value, the bound.
var putScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 and
   redis.call('HLEN', KEYS[1]) + redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[5]) then
  return redis.error_reply("SLUICE_TOO_MANY")
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
` + changeEnd)

// deleteScript: ARGV key.
var deleteScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[3]) == 0 then return -1 end
` + changeEnd)

// replaceDeclaredScript: ARGV key and value pairs. Replacing none by none
// changes nothing and announces nothing (a policy without
// RateLimitOverrides, reconciled at each of its changes).
var replaceDeclaredScript = redis.NewScript(`
if #ARGV == 2 and redis.call('HLEN', KEYS[2]) == 0 then return -1 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
` + changeEnd)

func (s *RedisStore) run(ctx context.Context, script *redis.Script, id PolicyID, args ...any) *redis.Cmd {
	runtime, declared := RedisHashKeys(id)
	return script.Run(ctx, s.client, []string{runtime, declared, RedisPoliciesKey, RedisRevisionKey}, append([]any{RedisChannel, id.String()}, args...)...)
}

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, id PolicyID, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode override: %w", err)
	}
	err = s.run(ctx, putScript, id, e.Key, string(b), MaxPerPolicy).Err()
	if err != nil && strings.Contains(err.Error(), "SLUICE_TOO_MANY") {
		return errorf(ErrTooMany, "policy %s has %d overrides, the most it may have (declared and run time together)", id, MaxPerPolicy)
	}
	if err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	return nil
}

// Delete implements Store.
func (s *RedisStore) Delete(ctx context.Context, id PolicyID, key string) (bool, error) {
	rev, err := s.run(ctx, deleteScript, id, key).Int64()
	if err != nil {
		return false, fmt.Errorf("overrides: %w", err)
	}
	return rev >= 0, nil
}

// ReplaceDeclared implements Store.
func (s *RedisStore) ReplaceDeclared(ctx context.Context, id PolicyID, entries map[string]Entry) error {
	args := make([]any, 0, 2*len(entries))
	for key, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode override: %w", err)
		}
		args = append(args, key, string(b))
	}
	if err := s.run(ctx, replaceDeclaredScript, id, args...).Err(); err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	return nil
}

// LoadPolicy implements Store.
func (s *RedisStore) LoadPolicy(ctx context.Context, id PolicyID) (Overrides, error) {
	runtimeKey, declaredKey := RedisHashKeys(id)
	var runtime, declared *redis.MapStringStringCmd
	if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		runtime, declared = p.HGetAll(ctx, runtimeKey), p.HGetAll(ctx, declaredKey)
		return nil
	}); err != nil {
		return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
	}
	var o Overrides
	var err error
	if o.Runtime, err = decodeEntries(id, runtime.Val()); err != nil {
		return Overrides{}, err
	}
	if o.Declared, err = decodeEntries(id, declared.Val()); err != nil {
		return Overrides{}, err
	}
	return o, nil
}

func decodeEntries(id PolicyID, raw map[string]string) (map[string]Entry, error) {
	out := make(map[string]Entry, len(raw))
	for key, v := range raw {
		var e Entry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			return nil, fmt.Errorf("override %q of %s: %w", key, id, err)
		}
		out[key] = e
	}
	return out, nil
}

// Load implements Store.
func (s *RedisStore) Load(ctx context.Context) (map[PolicyID]Overrides, error) {
	ids, err := s.client.SMembers(ctx, RedisPoliciesKey).Result()
	if err != nil {
		return nil, fmt.Errorf("overrides: %w", err)
	}
	out := make(map[PolicyID]Overrides, len(ids))
	for _, raw := range ids {
		ns, name, ok := strings.Cut(raw, "/")
		if !ok {
			continue
		}
		id := PolicyID{ns, name}
		if out[id], err = s.LoadPolicy(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Follow implements Store: a message whose revision follows the last one
// seen names the one policy that changed; any other gap, and the poll
// finding the revision moved, reload everything.
func (s *RedisStore) Follow(ctx context.Context, changed func(PolicyID), all func()) {
	sub := s.client.Subscribe(ctx, RedisChannel)
	defer sub.Close()
	msgs := sub.ChannelWithSubscriptions()
	t := time.NewTicker(s.poll)
	defer t.Stop()
	var seen int64 = -1
	reload := func() {
		rev, err := s.revision(ctx)
		if err != nil {
			return // the next poll tries again
		}
		all()
		seen = rev
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					reload() // first, and after a reconnection
				}
			case *redis.Message:
				revs, id, _ := strings.Cut(m.Payload, " ")
				rev, err := strconv.ParseInt(revs, 10, 64)
				ns, name, ok := strings.Cut(id, "/")
				if err != nil || !ok || rev != seen+1 {
					reload()
					continue
				}
				changed(PolicyID{ns, name})
				seen = rev
			}
		case <-t.C:
			if rev, err := s.revision(ctx); err == nil && rev != seen {
				reload()
			}
		}
	}
}

func (s *RedisStore) revision(ctx context.Context) (int64, error) {
	n, err := s.client.Get(ctx, RedisRevisionKey).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}
