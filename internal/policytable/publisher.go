package policytable

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// Library is the rate-limit library in Redis, which must be present
// wherever the table is: check processes call it for every request.
type Library interface {
	// EnsureLoaded loads the library on every master that lacks it.
	EnsureLoaded(ctx context.Context) error
	// Version names the library version.
	Version() string
}

// Publisher is the controller's writer: it puts validated policies into the
// table, making sure the library is loaded first. Its writes are
// serialized, so a periodic full sync and a reconcile of a new generation
// can never interleave their writes and leave an older version behind.
//
// Applies that arrive while a write is under way are written together
// next, in one table write with one revision and one change message (a
// group commit): thousands of policies applied at once cost the table,
// and every check process reloading it, one write per batch rather than
// one per policy.
type Publisher struct {
	Table   *Table
	Library Library

	mu sync.Mutex
	// writes counts the entries Apply and Remove wrote; written holds the
	// count at the last write of each entry ID since the last Sync.
	writes  uint64
	written map[string]uint64

	// pending are the Applies waiting for the next write.
	pendingMu sync.Mutex
	pending   []*pendingApply

	// decoded holds each entry of the table as the last Sync found it,
	// with the field it was decoded from: a Sync decodes only the fields
	// that changed since, not the whole table every time. Guarded by mu.
	decoded map[string]decodedField
}

// decodedField is a table's field and the entry it holds.
type decodedField struct {
	raw   string
	entry Entry
}

// pendingApply is one Apply's entry and, once written, its outcome.
type pendingApply struct {
	field    field
	written  bool
	revision int64
	err      error
}

// A Mark stands for the writes of Apply and Remove made before it. A full
// sync takes one before it lists the policies: what Apply and Remove write
// after it comes from a newer view of the policies than that list.
type Mark uint64

// Mark marks the writes made so far.
func (p *Publisher) Mark() Mark {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Mark(p.writes)
}

// wrote records a write of the entry id. Called with mu held.
func (p *Publisher) wrote(id string) {
	p.writes++
	if p.written == nil {
		p.written = make(map[string]uint64)
	}
	p.written[id] = p.writes
}

// Apply loads the library if needed and writes e, with the other Applies
// waiting at the time. When the table was lost it fails with
// ErrTableMissing: the next Sync writes the table back whole, and the
// caller retries.
func (p *Publisher) Apply(ctx context.Context, e *Entry) (revision int64, err error) {
	f, err := encodeField(e)
	if err != nil {
		return 0, err
	}
	call := &pendingApply{field: f}
	p.pendingMu.Lock()
	p.pending = append(p.pending, call)
	p.pendingMu.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()
	if !call.written { // else the write before this one took it
		p.writePending(ctx)
	}
	return call.revision, call.err
}

// writePending writes every pending Apply in one step and gives each its
// outcome. Called with mu held, by one of the waiting Applies: its ctx
// bounds the write of them all.
func (p *Publisher) writePending(ctx context.Context) {
	p.pendingMu.Lock()
	batch := p.pending
	p.pending = nil
	p.pendingMu.Unlock()

	fields := make([]field, len(batch))
	for i, call := range batch {
		fields[i] = call.field
	}
	var revision int64
	err := p.Library.EnsureLoaded(ctx)
	if err != nil {
		err = fmt.Errorf("load the rate-limit library: %w", err)
	} else if revision, _, err = p.Table.putFields(ctx, fields); err == nil {
		for _, f := range fields {
			p.wrote(f.id)
		}
	}
	for _, call := range batch {
		call.written, call.revision, call.err = true, revision, err
	}
}

// Remove deletes a policy from the table.
func (p *Publisher) Remove(ctx context.Context, namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _, err := p.Table.Delete(ctx, namespace, name)
	if err == nil {
		p.wrote(EntryID(namespace, name))
	}
	return err
}

// SyncResult counts what a Sync changed.
type SyncResult struct {
	Written, Removed int
	Revision         int64
	// Table is what the table holds after the sync, by Entry.ID.
	Table map[string]*Entry
}

// Sync makes the table hold exactly desired (keyed by Entry.ID) and the
// library present, in one step (see Replace), except for the entries that
// Apply or Remove wrote after since: those stay as they are, because
// desired comes from a list of the policies taken at since, older than
// what those calls wrote (a policy created after it would be removed, one
// deleted after it written back). Syncs must take their marks one at a
// time, each after the previous Sync returned.
func (p *Publisher) Sync(ctx context.Context, since Mark, desired func(current map[string]Entry) map[string]*Entry) (SyncResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res SyncResult
	if err := p.Library.EnsureLoaded(ctx); err != nil {
		return res, fmt.Errorf("load the rate-limit library: %w", err)
	}
	current, err := p.loadDecoded(ctx)
	if err != nil {
		return res, err
	}
	want := desired(current)
	for id, at := range p.written {
		switch cur, ok := current[id]; {
		case at <= uint64(since):
			delete(p.written, id) // the caller's list saw it; so will later syncs' lists
		case ok:
			want[id] = &cur
		default:
			delete(want, id)
		}
	}
	var puts []*Entry
	var deletes []string
	for id := range current {
		if _, keep := want[id]; !keep {
			deletes = append(deletes, id)
		}
	}
	for id, e := range want {
		if cur, ok := current[id]; ok && reflect.DeepEqual(&cur, e) {
			continue // already there
		}
		puts = append(puts, e)
	}
	// Stable order: the same sync writes the same command.
	sort.Slice(puts, func(i, j int) bool { return puts[i].ID() < puts[j].ID() })
	sort.Strings(deletes)
	rev, changed, err := p.Table.Replace(ctx, puts, deletes)
	if err != nil {
		return res, err
	}
	res.Revision, res.Table = rev, want
	if changed {
		res.Written, res.Removed = len(puts), len(deletes)
	}
	return res, nil
}

// loadDecoded reads the table, by entry ID, decoding only the fields that
// changed since the last call. Called with mu held.
func (p *Publisher) loadDecoded(ctx context.Context) (map[string]Entry, error) {
	fields, _, err := p.Table.loadFields(ctx)
	if err != nil {
		return nil, err
	}
	decoded := make(map[string]decodedField, len(fields))
	current := make(map[string]Entry, len(fields))
	for id, raw := range fields {
		d, ok := p.decoded[id]
		if !ok || d.raw != raw {
			e, err := decodeEntry(id, raw)
			if err != nil {
				return nil, err
			}
			d = decodedField{raw: raw, entry: e}
		}
		decoded[id] = d
		current[d.entry.ID()] = d.entry
	}
	p.decoded = decoded
	return current, nil
}
