package overrides

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis names of the overrides (one Cluster slot, thanks to the hash tag):
//
//	sluice:{overrides}:runtime:<namespace>/<policy>          hash: key value -> JSON Entry
//	sluice:{overrides}:declared:<namespace>/<policy>         hash: key value -> JSON Entry
//	sluice:{overrides}:digest:<namespace>/<policy>           the declared entries' digest
//	sluice:{overrides}:staging:<namespace>/<policy>:<random>  declared entries being written
//	sluice:{overrides}:policies                              set: the policies with overrides
//	sluice:{overrides}:revision                              counter, bumped by every change
//	sluice:overrides:changed                                 pub/sub: "<revision> <namespace>/<policy>"
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
// and a change reaches each within a second (a Tracker follows it).
type RedisStore struct {
	client redis.UniversalClient
}

// NewRedisStore returns a RedisStore over client.
func NewRedisStore(client redis.UniversalClient) *RedisStore {
	return &RedisStore{client: client}
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

// replaceDeclaredScript makes the staged hash (KEYS[5], holding ARGV[4]
// entries; none when 0) the declared one, and keeps its digest (KEYS[6],
// ARGV[3]). The old hash is freed in the background (UNLINK), so Redis
// answers checks meanwhile whatever its size. A staged hash that expired
// before its last write is an error: nothing changes.
var replaceDeclaredScript = redis.NewScript(`
local n = tonumber(ARGV[4])
if n > 0 and redis.call('HLEN', KEYS[5]) ~= n then
  redis.call('UNLINK', KEYS[5])
  return redis.error_reply("SLUICE_STAGING_LOST")
end
redis.call('UNLINK', KEYS[2])
if n > 0 then
  redis.call('RENAME', KEYS[5], KEYS[2])
  redis.call('PERSIST', KEYS[2])
  redis.call('SET', KEYS[6], ARGV[3])
else
  redis.call('DEL', KEYS[6])
end
` + changeEnd)

// Declared entries are written in batches of stageBatch to a staging hash
// that lives stageTTL at most, then swapped in: one command of 100,000
// entries would hold Redis for over a second, and every check with it.
const (
	stageBatch = 1000
	stageTTL   = 10 * time.Minute
)

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

// ReplaceDeclared implements Store. Entries equal to those in force (by
// their digest: a policy reconciled again, its RateLimitOverrides
// unchanged) write and announce nothing.
func (s *RedisStore) ReplaceDeclared(ctx context.Context, id PolicyID, entries map[string]Entry) error {
	keys := make([]string, 0, len(entries))
	for key := range entries {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	digest := sha256.New()
	values := make([]string, len(keys))
	for i, key := range keys {
		b, err := json.Marshal(entries[key])
		if err != nil {
			return fmt.Errorf("encode override: %w", err)
		}
		values[i] = string(b)
		fmt.Fprintf(digest, "%d:%s%d:%s", len(key), key, len(b), b)
	}
	sum := hex.EncodeToString(digest.Sum(nil))
	_, declaredKey := RedisHashKeys(id)
	digestKey := redisPrefix + "digest:" + id.String()
	if len(keys) == 0 {
		if n, err := s.client.Exists(ctx, declaredKey, digestKey).Result(); err != nil || n == 0 {
			return wrapOverrides(err) // none by none: nothing to say
		}
	} else if old, err := s.client.Get(ctx, digestKey).Result(); err == nil && old == sum {
		return nil
	} else if err != nil && err != redis.Nil {
		return wrapOverrides(err)
	}
	staging := redisPrefix + "staging:" + id.String() + ":" + randomSuffix()
	for start := 0; start < len(keys); start += stageBatch {
		end := min(start+stageBatch, len(keys))
		args := make([]any, 0, 2*(end-start))
		for i := start; i < end; i++ {
			args = append(args, keys[i], values[i])
		}
		if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, staging, args...)
			p.PExpire(ctx, staging, stageTTL)
			return nil
		}); err != nil {
			return wrapOverrides(err)
		}
	}
	runtimeKey, _ := RedisHashKeys(id)
	err := replaceDeclaredScript.Run(ctx, s.client,
		[]string{runtimeKey, declaredKey, RedisPoliciesKey, RedisRevisionKey, staging, digestKey},
		RedisChannel, id.String(), sum, len(keys)).Err()
	return wrapOverrides(err)
}

func wrapOverrides(err error) error {
	if err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	return nil
}

// randomSuffix names one write's staging hash.
func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LoadPolicy implements Store. A policy's hashes are read at once (HGETALL
// in a transaction) when small, else in batches (HSCAN), so that reading
// 100,000 overrides does not hold Redis for one huge reply; a batched read
// that a change overlapped (the revision moved) is made again.
func (s *RedisStore) LoadPolicy(ctx context.Context, id PolicyID) (Overrides, error) {
	runtimeKey, declaredKey := RedisHashKeys(id)
	var runtimeLen, declaredLen *redis.IntCmd
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		runtimeLen, declaredLen = p.HLen(ctx, runtimeKey), p.HLen(ctx, declaredKey)
		return nil
	}); err != nil {
		return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
	}
	if runtimeLen.Val()+declaredLen.Val() <= stageBatch {
		var runtime, declared *redis.MapStringStringCmd
		if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			runtime, declared = p.HGetAll(ctx, runtimeKey), p.HGetAll(ctx, declaredKey)
			return nil
		}); err != nil {
			return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
		}
		return decodeOverrides(id, runtime.Val(), declared.Val())
	}
	for range 3 {
		before, err := s.revision(ctx)
		if err != nil {
			return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
		}
		runtime, err := s.scanHash(ctx, runtimeKey)
		if err != nil {
			return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
		}
		declared, err := s.scanHash(ctx, declaredKey)
		if err != nil {
			return Overrides{}, fmt.Errorf("overrides of %s: %w", id, err)
		}
		if after, err := s.revision(ctx); err != nil || after != before {
			continue
		}
		return decodeOverrides(id, runtime, declared)
	}
	return Overrides{}, fmt.Errorf("overrides of %s changed during each of three reads", id)
}

// scanHash reads a hash in batches of about stageBatch fields.
func (s *RedisStore) scanHash(ctx context.Context, key string) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := s.client.HScan(ctx, key, cursor, "", stageBatch).Result()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func decodeOverrides(id PolicyID, runtime, declared map[string]string) (Overrides, error) {
	var o Overrides
	var err error
	if o.Runtime, err = decodeEntries(id, runtime); err != nil {
		return Overrides{}, err
	}
	if o.Declared, err = decodeEntries(id, declared); err != nil {
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

func (s *RedisStore) revision(ctx context.Context) (int64, error) {
	n, err := s.client.Get(ctx, RedisRevisionKey).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}
