package overrides

import (
	"context"
	"sync"
)

// Store keeps the run-time overrides: Redis in a cluster and in local mode
// with --redis-url (shared by every process, surviving restarts), else the
// memory of a local process.
type Store interface {
	// Put sets e as the run-time override of e.Key for id. When id has no
	// override for e.Key and has room or more already, it fails with
	// ErrTooMany and changes nothing.
	Put(ctx context.Context, id PolicyID, e Entry, room int) error
	// Delete removes id's run-time override of key; deleted is false when
	// there was none.
	Delete(ctx context.Context, id PolicyID, key string) (deleted bool, err error)
	// LoadPolicy reads id's run-time overrides, by key.
	LoadPolicy(ctx context.Context, id PolicyID) (map[string]Entry, error)
	// Load reads every policy's run-time overrides.
	Load(ctx context.Context) (map[PolicyID]map[string]Entry, error)
	// Follow calls changed with each policy whose overrides any process
	// changed, and all when changes may have been missed (first, and
	// after a reconnection), until ctx ends. Calls are not concurrent.
	Follow(ctx context.Context, changed func(PolicyID), all func())
}

// Follow keeps x's run-time overrides equal to the store's until ctx ends.
func (x *Index) Follow(ctx context.Context, s Store) {
	s.Follow(ctx, func(id PolicyID) {
		entries, err := s.LoadPolicy(ctx, id)
		if err != nil {
			x.log.Warn("cannot load run-time overrides; the ones in force stay until they load", "policy", id.String(), "err", err)
			return
		}
		x.SetRuntime(id, entries)
	}, func() {
		all, err := s.Load(ctx)
		if err != nil {
			x.log.Warn("cannot load run-time overrides; the ones in force stay until they load", "err", err)
			return
		}
		x.ReplaceRuntime(all)
	})
}

// MemoryStore is a Store in the process's memory (local mode without
// Redis): exact for the one process, lost when it ends.
type MemoryStore struct {
	mu        sync.Mutex
	policies  map[PolicyID]map[string]Entry
	followers map[*memoryFollower]bool
}

// memoryFollower is one Follow: the policies changed since it last looked,
// and a wake-up.
type memoryFollower struct {
	pending map[PolicyID]bool
	wake    chan struct{}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{policies: map[PolicyID]map[string]Entry{}, followers: map[*memoryFollower]bool{}}
}

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, id PolicyID, e Entry, room int) error {
	m.mu.Lock()
	entries := m.policies[id]
	if _, ok := entries[e.Key]; !ok && len(entries) >= room {
		m.mu.Unlock()
		return errorf(ErrTooMany, "policy %s has %d overrides, the most it may have (declared and run time together)", id, MaxPerPolicy)
	}
	if entries == nil {
		entries = map[string]Entry{}
		m.policies[id] = entries
	}
	entries[e.Key] = e
	m.announce(id)
	m.mu.Unlock()
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, id PolicyID, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.policies[id][key]; !ok {
		return false, nil
	}
	delete(m.policies[id], key)
	if len(m.policies[id]) == 0 {
		delete(m.policies, id)
	}
	m.announce(id)
	return true, nil
}

// LoadPolicy implements Store.
func (m *MemoryStore) LoadPolicy(_ context.Context, id PolicyID) (map[string]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cloneEntries(m.policies[id]), nil
}

// Load implements Store.
func (m *MemoryStore) Load(_ context.Context) (map[PolicyID]map[string]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[PolicyID]map[string]Entry, len(m.policies))
	for id, entries := range m.policies {
		out[id] = cloneEntries(entries)
	}
	return out, nil
}

// Follow implements Store.
func (m *MemoryStore) Follow(ctx context.Context, changed func(PolicyID), all func()) {
	f := &memoryFollower{pending: map[PolicyID]bool{}, wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.followers[f] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.followers, f)
		m.mu.Unlock()
	}()
	all()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
			m.mu.Lock()
			ids := f.pending
			f.pending = map[PolicyID]bool{}
			m.mu.Unlock()
			for id := range ids {
				changed(id)
			}
		}
	}
}

// announce tells the followers that id changed. m.mu is held.
func (m *MemoryStore) announce(id PolicyID) {
	for f := range m.followers {
		f.pending[id] = true
		select {
		case f.wake <- struct{}{}:
		default: // woken already
		}
	}
}

func cloneEntries(entries map[string]Entry) map[string]Entry {
	out := make(map[string]Entry, len(entries))
	for k, e := range entries {
		out[k] = e
	}
	return out
}
