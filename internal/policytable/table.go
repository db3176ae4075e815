// Package policytable is the policy table in Redis: the controller writes
// the valid policies into it, and every check process reads it. It is the
// check processes' only input, so they need no Kubernetes access.
//
// Layout (one Cluster slot, thanks to the hash tag):
//
//	sluice:{policies}           hash: "<namespace>/<name>" -> JSON Entry
//	sluice:{policies}:revision  string: the table's revision
//	sluice:policies:changed     pub/sub channel: the new revision
//
// Every change bumps the revision to max(old+1, Redis time in µs), so a
// revision is never reused, even after FLUSHALL empties the table and it is
// written anew: a reader that compares revisions cannot miss a change.
package policytable

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Redis names of the table.
const (
	HashKey     = "sluice:{policies}"
	RevisionKey = "sluice:{policies}:revision"
	Channel     = "sluice:policies:changed"
)

// Entry is one policy in the table: the validated spec, which every check
// process compiles with the same compiler the controller validated it with.
type Entry struct {
	Namespace  string                                `json:"namespace"`
	Name       string                                `json:"name"`
	Generation int64                                 `json:"generation"`
	Spec       ratelimitv1alpha1.RateLimitPolicySpec `json:"spec"`
}

// ID is the entry's field in the hash.
func (e *Entry) ID() string { return e.Namespace + "/" + e.Name }

// Table reads and writes the policy table.
type Table struct {
	client redis.UniversalClient
}

// New returns a Table over client.
func New(client redis.UniversalClient) *Table { return &Table{client: client} }

// putScript sets a field unless it already holds the value, and on a change
// bumps the revision and announces it. It returns {revision, changed}.
var putScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
local rev = tonumber(redis.call('GET', KEYS[2]) or '0')
if old == ARGV[2] then return {rev, 0} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t = redis.call('TIME')
rev = math.max(rev + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], rev)
redis.call('PUBLISH', ARGV[3], rev)
return {rev, 1}
`)

// deleteScript removes a field; on a change it bumps and announces the revision.
var deleteScript = redis.NewScript(`
local rev = tonumber(redis.call('GET', KEYS[2]) or '0')
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return {rev, 0} end
local t = redis.call('TIME')
rev = math.max(rev + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], rev)
redis.call('PUBLISH', ARGV[2], rev)
return {rev, 1}
`)

// Put writes e. A write that changes nothing costs no revision.
func (t *Table) Put(ctx context.Context, e *Entry) (revision int64, changed bool, err error) {
	b, err := json.Marshal(e)
	if err != nil {
		return 0, false, fmt.Errorf("encode %s: %w", e.ID(), err)
	}
	return runChange(ctx, putScript, t.client, e.ID(), string(b), Channel)
}

// Delete removes a policy.
func (t *Table) Delete(ctx context.Context, namespace, name string) (revision int64, changed bool, err error) {
	return runChange(ctx, deleteScript, t.client, namespace+"/"+name, Channel)
}

func runChange(ctx context.Context, s *redis.Script, c redis.UniversalClient, args ...any) (int64, bool, error) {
	res, err := s.Run(ctx, c, []string{HashKey, RevisionKey}, args...).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("policy table: %w", err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("policy table: unexpected reply %v", res)
	}
	return res[0], res[1] == 1, nil
}

// Load reads the whole table and its revision at one instant.
func (t *Table) Load(ctx context.Context) ([]Entry, int64, error) {
	var all *redis.MapStringStringCmd
	var rev *redis.StringCmd
	_, err := t.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, HashKey)
		rev = p.Get(ctx, RevisionKey)
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, 0, fmt.Errorf("policy table: %w", err)
	}
	revision, err := parseRevision(rev)
	if err != nil {
		return nil, 0, err
	}
	entries := make([]Entry, 0, len(all.Val()))
	for id, raw := range all.Val() {
		var e Entry
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, 0, fmt.Errorf("policy table: entry %s: %w", id, err)
		}
		entries = append(entries, e)
	}
	return entries, revision, nil
}

// Revision reads the table's revision (0 for an empty, never written table).
func (t *Table) Revision(ctx context.Context) (int64, error) {
	return parseRevision(t.client.Get(ctx, RevisionKey))
}

func parseRevision(cmd *redis.StringCmd) (int64, error) {
	s, err := cmd.Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("policy table revision: %w", err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("policy table revision %q: %w", s, err)
	}
	return n, nil
}

// IDs lists the policies in the table.
func (t *Table) IDs(ctx context.Context) ([]string, error) {
	ids, err := t.client.HKeys(ctx, HashKey).Result()
	if err != nil {
		return nil, fmt.Errorf("policy table: %w", err)
	}
	return ids, nil
}

// Get reads one entry; ok is false when the table has none.
func (t *Table) Get(ctx context.Context, namespace, name string) (e Entry, ok bool, err error) {
	raw, err := t.client.HGet(ctx, HashKey, namespace+"/"+name).Result()
	if err == redis.Nil {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("policy table: %w", err)
	}
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return Entry{}, false, fmt.Errorf("policy table: entry %s/%s: %w", namespace, name, err)
	}
	return e, true, nil
}
