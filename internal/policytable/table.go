// Package policytable is the policy table in Redis: the controller writes
// the valid policies into it, and every check process reads it. It is the
// check processes' only input, so they need no Kubernetes access.
//
// Layout (one Cluster slot, thanks to the hash tag):
//
//	sluice:{policies}           hash: "<namespace>/<name>" -> JSON Entry,
//	                            and the field "table" (see MarkerField)
//	sluice:{policies}:revision  string: the table's revision
//	sluice:policies:changed     pub/sub channel: the new revision
//
// Every change bumps the revision to max(old+1, Redis time in µs), so a
// revision is never reused, even after FLUSHALL empties the table and it is
// written anew: a reader that compares revisions cannot miss a change.
//
// A table without a revision, or whose hash lacks the marker field, is
// missing: never written, lost to FLUSHALL, a restart or a failover to an
// empty replica, or its hash alone evicted by an allkeys-* maxmemory
// policy (the two keys are evicted apart). Only Replace, the controller's
// full sync, writes a missing table, and it writes it whole in one step: a
// reader never sees a table that holds some policies and not yet the
// others, which would let requests skip the missing ones.
package policytable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Redis names of the table.
const (
	HashKey     = "sluice:{policies}"
	RevisionKey = "sluice:{policies}:revision"
	Channel     = "sluice:policies:changed"
)

// MarkerField is the hash's field that says the hash was written whole by
// Replace. It is not a policy ID (those hold a '/'). Without it, a hash that
// was evicted while the revision stayed would take a single policy's Put
// and be read as a table of that one policy.
const MarkerField = "table"

// Entry is one policy in the table: the validated spec, which every check
// process compiles with the same compiler the controller validated it with.
type Entry struct {
	Namespace  string                                `json:"namespace"`
	Name       string                                `json:"name"`
	Generation int64                                 `json:"generation"`
	Spec       ratelimitv1alpha1.RateLimitPolicySpec `json:"spec"`
	// Routes are the spec's targetRefs as the controller resolved them
	// from the cluster's Gateways and HTTPRoutes; nil without targetRefs.
	Routes *policy.Routes `json:"routes,omitempty"`
}

// ID is the entry's field in the hash.
func (e *Entry) ID() string { return EntryID(e.Namespace, e.Name) }

// EntryID is the field in the hash of the policy namespace/name.
func EntryID(namespace, name string) string { return namespace + "/" + name }

// Table reads and writes the policy table.
type Table struct {
	client redis.UniversalClient
}

// New returns a Table over client.
func New(client redis.UniversalClient) *Table { return &Table{client: client} }

// ErrTableMissing is returned by Put when the table has no revision or its
// hash no marker: it was lost, and only the controller's full sync (Replace) may write it back.
var ErrTableMissing = errors.New("policy table missing in Redis (emptied by FLUSHALL, a restart or a failover); the controller's table sync writes it back whole")

// bumpRevision ends the scripts that changed the table: the new revision is
// above the old one and above any earlier one (server time), written as an
// integer, and announced.
const bumpRevision = `
local t = redis.call('TIME')
rev = math.max(rev + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%d', rev))
redis.call('PUBLISH', ARGV[1], string.format('%d', rev))
return {rev, 1}
`

// putScript sets fields of an existing table, each unless it already
// holds the value, with one revision for them all. ARGV: channel, the
// marker field, then id and value pairs. It returns {revision, changed}.
var putScript = redis.NewScript(`
local revs = redis.call('GET', KEYS[2])
if not revs or not redis.call('HGET', KEYS[1], ARGV[2]) then
  return redis.error_reply("SLUICE_TABLE_MISSING")
end
local rev = tonumber(revs)
local changed = false
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    changed = true
  end
end
if not changed then return {rev, 0} end
` + bumpRevision)

// deleteScript removes a field. ARGV: channel, id.
var deleteScript = redis.NewScript(`
local rev = tonumber(redis.call('GET', KEYS[2]) or '0')
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return {rev, 0} end
` + bumpRevision)

// replaceScript applies a full sync in one step: it sets the changed
// fields, deletes the removed ones, and creates the revision and the
// marker of a missing table even when nothing else changes. ARGV: channel,
// the marker field, the number of fields to set, then id and value pairs,
// then the ids to delete. (HGET and HSET, not HSETNX: the controller's ACL
// user has those.)
var replaceScript = redis.NewScript(`
local revs = redis.call('GET', KEYS[2])
local changed = not revs
local rev = tonumber(revs or '0')
if redis.call('HGET', KEYS[1], ARGV[2]) ~= '1' then
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  changed = true
end
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local id, v = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  if redis.call('HGET', KEYS[1], id) ~= v then
    redis.call('HSET', KEYS[1], id, v)
    changed = true
  end
end
for i = 4 + 2 * n, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then changed = true end
end
if not changed then return {rev, 0} end
` + bumpRevision)

// Put writes e into the table. A write that changes nothing costs no
// revision. It fails with ErrTableMissing when the table was lost.
func (t *Table) Put(ctx context.Context, e *Entry) (revision int64, changed bool, err error) {
	f, err := encodeField(e)
	if err != nil {
		return 0, false, err
	}
	return t.putFields(ctx, []field{f})
}

// field is an entry as the table's hash holds it.
type field struct{ id, raw string }

func encodeField(e *Entry) (field, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return field{}, fmt.Errorf("encode %s: %w", e.ID(), err)
	}
	return field{id: e.ID(), raw: string(b)}, nil
}

// putFields writes fields into the table in one step, as Put does one
// entry: one revision and one change message for them all.
func (t *Table) putFields(ctx context.Context, fields []field) (revision int64, changed bool, err error) {
	args := make([]any, 0, 2+2*len(fields))
	args = append(args, Channel, MarkerField)
	for _, f := range fields {
		args = append(args, f.id, f.raw)
	}
	return runChange(ctx, putScript, t.client, args...)
}

// Delete removes a policy.
func (t *Table) Delete(ctx context.Context, namespace, name string) (revision int64, changed bool, err error) {
	return runChange(ctx, deleteScript, t.client, Channel, EntryID(namespace, name))
}

// Replace writes puts and removes deletes in one step, and creates a
// missing table (with no entries when both are empty).
func (t *Table) Replace(ctx context.Context, puts []*Entry, deletes []string) (revision int64, changed bool, err error) {
	args := make([]any, 0, 3+2*len(puts)+len(deletes))
	args = append(args, Channel, MarkerField, len(puts))
	for _, e := range puts {
		f, err := encodeField(e)
		if err != nil {
			return 0, false, err
		}
		args = append(args, f.id, f.raw)
	}
	for _, id := range deletes {
		args = append(args, id)
	}
	return runChange(ctx, replaceScript, t.client, args...)
}

func runChange(ctx context.Context, s *redis.Script, c redis.UniversalClient, args ...any) (int64, bool, error) {
	res, err := s.Run(ctx, c, []string{HashKey, RevisionKey}, args...).Int64Slice()
	if err != nil {
		if strings.Contains(err.Error(), "SLUICE_TABLE_MISSING") {
			return 0, false, ErrTableMissing
		}
		return 0, false, fmt.Errorf("policy table: %w", err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("policy table: unexpected reply %v", res)
	}
	return res[0], res[1] == 1, nil
}

// Load reads the whole table and its revision at one instant. A missing
// table has revision 0 and no entries, whatever its revision key says.
func (t *Table) Load(ctx context.Context) ([]Entry, int64, error) {
	fields, revision, err := t.loadFields(ctx)
	if err != nil {
		return nil, 0, err
	}
	entries := make([]Entry, 0, len(fields))
	for id, raw := range fields {
		e, err := decodeEntry(id, raw)
		if err != nil {
			return nil, 0, err
		}
		entries = append(entries, e)
	}
	return entries, revision, nil
}

// loadFields is Load before decoding: each policy's field as stored, by ID.
func (t *Table) loadFields(ctx context.Context) (map[string]string, int64, error) {
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
	fields := all.Val()
	if len(fields) == 0 {
		// The hash is gone (a table with no policies still has its marker).
		return nil, 0, nil
	}
	// A hash with policies and no marker was written by a controller from
	// before the marker: a whole table, which its next sync marks.
	delete(fields, MarkerField)
	return fields, revision, nil
}

func decodeEntry(id, raw string) (Entry, error) {
	var e Entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return e, fmt.Errorf("policy table: entry %s: %w", id, err)
	}
	return e, nil
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
	return slices.DeleteFunc(ids, func(id string) bool { return id == MarkerField }), nil
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
