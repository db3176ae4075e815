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
	// run-time override for e.Key and MaxPerPolicy overrides (declared
	// and run time) already, it fails with ErrTooMany and changes nothing.
	Put(ctx context.Context, id PolicyID, e Entry) error
	// Delete removes id's run-time override of key; deleted is false when
	// there was none.
	Delete(ctx context.Context, id PolicyID, key string) (deleted bool, err error)
	// ReplaceDeclared makes entries (by key) id's declared overrides, in
	// one step; none removes them.
	ReplaceDeclared(ctx context.Context, id PolicyID, entries map[string]Entry) error
	// LoadPolicy reads id's overrides.
	LoadPolicy(ctx context.Context, id PolicyID) (Overrides, error)
	// Load reads every policy's overrides.
	Load(ctx context.Context) (map[PolicyID]Overrides, error)
}

// Overrides are one policy's overrides by source, each by key.
type Overrides struct {
	Runtime, Declared map[string]Entry
}

func (o Overrides) empty() bool { return len(o.Runtime) == 0 && len(o.Declared) == 0 }

// Follow keeps x's overrides equal to m's until ctx ends (local mode
// without Redis; a RedisStore is followed by a Tracker).
func (x *Index) Follow(ctx context.Context, m *MemoryStore) {
	m.follow(ctx, func(id PolicyID) error { return x.reload(ctx, m, id) }, func() error { return x.reloadAll(ctx, m) })
}

// reload reads id's overrides from s into x.
func (x *Index) reload(ctx context.Context, s Store, id PolicyID) error {
	o, err := s.LoadPolicy(ctx, id)
	if err != nil {
		x.log.Warn("cannot load overrides; the ones in force stay until they load", "policy", id.String(), "err", err)
		return err
	}
	x.set(id, o)
	return nil
}

// reloadAll reads every policy's overrides from s into x.
func (x *Index) reloadAll(ctx context.Context, s Store) error {
	all, err := s.Load(ctx)
	if err != nil {
		x.log.Warn("cannot load overrides; the ones in force stay until they load", "err", err)
		return err
	}
	x.replace(all)
	return nil
}

// MemoryStore is a Store in the process's memory (local mode without
// Redis): exact for the one process, lost when it ends.
type MemoryStore struct {
	mu        sync.Mutex
	policies  map[PolicyID]Overrides
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
	return &MemoryStore{policies: map[PolicyID]Overrides{}, followers: map[*memoryFollower]bool{}}
}

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, id PolicyID, e Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.policies[id]
	if _, ok := o.Runtime[e.Key]; !ok && len(o.Runtime)+len(o.Declared) >= MaxPerPolicy {
		return errorf(ErrTooMany, "policy %s has %d overrides, the most it may have (declared and run time together)", id, MaxPerPolicy)
	}
	if o.Runtime == nil {
		o.Runtime = map[string]Entry{}
	}
	o.Runtime[e.Key] = e
	m.policies[id] = o
	m.announce(id)
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, id PolicyID, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.policies[id]
	if _, ok := o.Runtime[key]; !ok {
		return false, nil
	}
	delete(o.Runtime, key)
	m.store(id, o)
	return true, nil
}

// ReplaceDeclared implements Store.
func (m *MemoryStore) ReplaceDeclared(_ context.Context, id PolicyID, entries map[string]Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.policies[id]
	if len(entries) == 0 && len(o.Declared) == 0 {
		return nil // nothing to replace: no change to announce
	}
	o.Declared = cloneEntries(entries)
	m.store(id, o)
	return nil
}

// store keeps o as id's overrides and announces the change. m.mu is held.
func (m *MemoryStore) store(id PolicyID, o Overrides) {
	if o.empty() {
		delete(m.policies, id)
	} else {
		m.policies[id] = o
	}
	m.announce(id)
}

// LoadPolicy implements Store.
func (m *MemoryStore) LoadPolicy(_ context.Context, id PolicyID) (Overrides, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.policies[id].clone(), nil
}

// Load implements Store.
func (m *MemoryStore) Load(_ context.Context) (map[PolicyID]Overrides, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[PolicyID]Overrides, len(m.policies))
	for id, o := range m.policies {
		out[id] = o.clone()
	}
	return out, nil
}

// follow calls all, then changed with each policy whose overrides
// changed, until ctx ends. Its calls read the process's memory and cannot
// fail.
func (m *MemoryStore) follow(ctx context.Context, changed func(PolicyID) error, all func() error) {
	f := &memoryFollower{pending: map[PolicyID]bool{}, wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.followers[f] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.followers, f)
		m.mu.Unlock()
	}()
	_ = all()
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
				_ = changed(id)
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

func (o Overrides) clone() Overrides {
	return Overrides{Runtime: cloneEntries(o.Runtime), Declared: cloneEntries(o.Declared)}
}

func cloneEntries(entries map[string]Entry) map[string]Entry {
	out := make(map[string]Entry, len(entries))
	for k, e := range entries {
		out[k] = e
	}
	return out
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)
