package overrides

import (
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Index holds every policy's overrides, run time and declared, and gives
// the checker the one in force for a key value (it implements
// check.Overrides). A change replaces one policy's entries of one source;
// lookups read an immutable snapshot and never wait for a change.
type Index struct {
	log *slog.Logger

	mu   sync.Mutex // serializes changes
	snap atomic.Pointer[map[PolicyID]*policyOverrides]
}

// NewIndex returns an empty Index. log receives the overrides that do not
// compile against their policy (after the policy changed), once per
// compilation; nil: slog.Default().
func NewIndex(log *slog.Logger) *Index {
	if log == nil {
		log = slog.Default()
	}
	x := &Index{log: log}
	x.snap.Store(&map[PolicyID]*policyOverrides{})
	return x
}

// policyOverrides are one policy's overrides, as set, and compiled against
// the last version of the policy a lookup met.
type policyOverrides struct {
	id                PolicyID
	runtime, declared map[string]Entry

	mu       sync.Mutex // serializes compilation
	compiled atomic.Pointer[compiledOverrides]
}

type compiledOverrides struct {
	policy *policy.Policy
	byKey  map[string]*policy.Override
}

// Override implements check.Overrides: the run-time override of keyValue,
// else its declared one, compiled against p. A policy without overrides
// costs one map lookup.
func (x *Index) Override(p *policy.Policy, keyValue string) *policy.Override {
	snap := *x.snap.Load()
	if len(snap) == 0 {
		return nil
	}
	po := snap[PolicyID{p.Namespace, p.Name}]
	if po == nil {
		return nil
	}
	c := po.compiled.Load()
	if c == nil || c.policy != p {
		c = po.compile(p, x.log)
	}
	return c.byKey[keyValue]
}

// compile compiles the overrides against p (a new version of the policy
// recompiles them at its first lookup). Entries that p cannot take (a
// limit renamed since) are left out and logged.
func (po *policyOverrides) compile(p *policy.Policy, log *slog.Logger) *compiledOverrides {
	po.mu.Lock()
	defer po.mu.Unlock()
	if c := po.compiled.Load(); c != nil && c.policy == p {
		return c
	}
	c := &compiledOverrides{policy: p, byKey: make(map[string]*policy.Override, len(po.runtime)+len(po.declared))}
	for _, entries := range []map[string]Entry{po.declared, po.runtime} { // run time last: it wins
		for key, e := range entries {
			o, err := e.compile(p)
			if err != nil {
				log.Warn("override does not apply to its policy", "policy", po.id.String(), "key", key, "source", e.Source, "err", err)
				continue
			}
			c.byKey[key] = o
		}
	}
	po.compiled.Store(c)
	return c
}

// SetRuntime replaces id's run-time overrides with entries (by key).
func (x *Index) SetRuntime(id PolicyID, entries map[string]Entry) {
	x.change(id, func(po *policyOverrides) { po.runtime = entries })
}

// SetDeclared replaces id's declared overrides with entries (by key).
func (x *Index) SetDeclared(id PolicyID, entries map[string]Entry) {
	x.change(id, func(po *policyOverrides) { po.declared = entries })
}

// set replaces id's overrides with o.
func (x *Index) set(id PolicyID, o Overrides) {
	x.change(id, func(po *policyOverrides) { po.runtime, po.declared = o.Runtime, o.Declared })
}

// replace replaces every policy's overrides with all (a full load of the
// store).
func (x *Index) replace(all map[PolicyID]Overrides) {
	x.mu.Lock()
	defer x.mu.Unlock()
	next := make(map[PolicyID]*policyOverrides, len(all))
	for id, o := range all {
		if !o.empty() {
			next[id] = &policyOverrides{id: id, runtime: o.Runtime, declared: o.Declared}
		}
	}
	x.snap.Store(&next)
}

func (x *Index) change(id PolicyID, set func(*policyOverrides)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	next := maps.Clone(*x.snap.Load())
	po := &policyOverrides{id: id}
	if old := next[id]; old != nil {
		po.runtime, po.declared = old.runtime, old.declared
	}
	set(po)
	if len(po.runtime) == 0 && len(po.declared) == 0 {
		delete(next, id)
	} else {
		next[id] = po
	}
	x.snap.Store(&next)
}
