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
// table, making sure the library is loaded first. Its methods are
// serialized, so a periodic full sync and a reconcile of a new generation
// can never interleave their writes and leave an older version behind.
type Publisher struct {
	Table   *Table
	Library Library

	mu sync.Mutex
	// writes counts the entries Apply and Remove wrote; written holds the
	// count at the last write of each entry ID since the last Sync.
	writes  uint64
	written map[string]uint64
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

// Apply loads the library if needed and writes e. When the table was lost
// it fails with ErrTableMissing: the next Sync writes the table back whole,
// and the caller retries.
func (p *Publisher) Apply(ctx context.Context, e *Entry) (revision int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.Library.EnsureLoaded(ctx); err != nil {
		return 0, fmt.Errorf("load the rate-limit library: %w", err)
	}
	revision, _, err = p.Table.Put(ctx, e)
	if err == nil {
		p.wrote(e.ID())
	}
	return revision, err
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
	entries, _, err := p.Table.Load(ctx)
	if err != nil {
		return res, err
	}
	current := make(map[string]Entry, len(entries))
	for _, e := range entries {
		current[e.ID()] = e
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
