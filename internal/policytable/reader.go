package policytable

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Reader keeps the check process's policy set equal to the table. It is
// the table's handler of a fleet.Follower, which loads the table at start
// (Poll), reloads it on every change message (Message), and polls the
// revision as a fallback, since pub/sub drops messages while a connection
// is re-established.
type Reader struct {
	table *Table
	log   *slog.Logger

	set      atomic.Pointer[policy.Set]
	revision atomic.Int64
	loaded   atomic.Bool
	// unreadable and missing are set while the table cannot be loaded or
	// is gone, so that an outage is logged when it begins and when it
	// ends, not at every poll.
	unreadable, missing atomic.Bool

	mu       sync.Mutex
	problems map[string]string // "ns/name" -> why it is not enforced

	// compiled are the policies of the last load by ID, with the field
	// each was compiled from (the follower's loop only).
	compiled map[string]compiledEntry
}

// NewReader returns a Reader of table; a fleet.Follower keeps it current.
func NewReader(table *Table, log *slog.Logger) *Reader {
	if log == nil {
		log = slog.Default()
	}
	r := &Reader{table: table, log: log, problems: map[string]string{}}
	r.set.Store(policy.NewSet(0, nil))
	r.revision.Store(-1)
	return r
}

// Policies implements check.Source.
func (r *Reader) Policies() *policy.Set { return r.set.Load() }

// Loaded reports whether the table was read at least once.
func (r *Reader) Loaded() bool { return r.loaded.Load() }

// Problems reports table entries this process cannot enforce (a spec that
// does not compile here, as after a version skew).
func (r *Reader) Problems() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.problems))
	for k, v := range r.problems {
		out[k] = v
	}
	return out
}

// Message reloads the table on a change message: a revision newer than the
// one in force. One at or below it is most often a change loaded already
// (a burst of changes costs one load each time the reader catches up), but
// revisions start again after Redis lost its data: such a message reloads
// only when the table's revision differs from the one in force, as a poll
// does. Other messages on Channel (refunds) are not the table's. The
// revision 0 wakes the reader up to check the table.
func (r *Reader) Message(ctx context.Context, payload string) {
	rev, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		return
	}
	r.refresh(ctx, rev == 0 || rev > r.revision.Load())
}

// Poll loads the table when its revision moved, or when it never loaded.
func (r *Reader) Poll(ctx context.Context) { r.refresh(ctx, false) }

// Subscribed polls: changes made while the subscription was down sent
// messages that are lost.
func (r *Reader) Subscribed(ctx context.Context) { r.refresh(ctx, false) }

// refresh reloads the table when its revision moved (or always when force).
func (r *Reader) refresh(ctx context.Context, force bool) {
	callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !force && r.loaded.Load() {
		rev, err := r.table.Revision(callCtx)
		if err != nil {
			r.log.Debug("policy table revision", "err", err)
			return
		}
		if rev == r.revision.Load() {
			return
		}
	}
	fields, rev, err := r.table.loadFields(callCtx)
	if err != nil {
		if !r.unreadable.Swap(true) {
			r.log.Warn("cannot load the policy table; the policies in force stay until it loads again", "err", err)
		}
		return
	}
	if r.unreadable.Swap(false) {
		r.log.Info("policy table readable again")
	}
	if r.loaded.Load() && rev == r.revision.Load() {
		return
	}
	if rev == 0 && r.revision.Load() > 0 {
		// The table is gone (FLUSHALL, a failover to an empty replica):
		// deletions bump the revision, so this is not "no policies". Keep
		// enforcing what we have until the controller writes it back.
		if !r.missing.Swap(true) {
			r.log.Warn("policy table missing in Redis; keeping the policies in force until it is restored")
		}
		return
	}
	r.missing.Store(false)
	policies := make([]*policy.Policy, 0, len(fields))
	problems := map[string]string{}
	compiled := make(map[string]compiledEntry, len(fields))
	for id, raw := range fields {
		if c, ok := r.compiled[id]; ok && !c.kept && c.raw == raw {
			// Unchanged since the last load: a change recompiles its
			// policies only, whatever the size of the table.
			compiled[id] = c
			policies = append(policies, c.policy)
			continue
		}
		p, err := compileEntry(id, raw)
		if err != nil {
			// The controller validated it: only a different version of
			// Sluice can disagree. Keep what this process enforced before.
			problems[id] = err.Error()
			if old := r.compiled[id]; old.policy != nil {
				compiled[id] = compiledEntry{raw: raw, policy: old.policy, kept: true}
				policies = append(policies, old.policy)
			}
			r.log.Error("policy in the table does not compile here", "policy", id, "err", err)
			continue
		}
		compiled[id] = compiledEntry{raw: raw, policy: p}
		policies = append(policies, p)
	}
	r.compiled = compiled
	r.mu.Lock()
	r.problems = problems
	r.mu.Unlock()
	r.set.Store(policy.NewSet(rev, policies))
	r.revision.Store(rev)
	r.loaded.Store(true)
	r.log.Info("policy table loaded", "revision", rev, "policies", len(policies))
}

// compiledEntry is a policy and the table's field it was compiled from,
// or with kept an older version kept because that field did not compile
// (compiled again at each load, so its problem stays reported).
type compiledEntry struct {
	raw    string
	policy *policy.Policy
	kept   bool
}

// compileEntry decodes and compiles a table's field.
func compileEntry(id, raw string) (*policy.Policy, error) {
	e, err := decodeEntry(id, raw)
	if err != nil {
		return nil, err
	}
	p, err := policy.CompileTargeted(e.Namespace, e.Name, &e.Spec, e.Routes)
	if err != nil {
		return nil, err
	}
	p.Generation = e.Generation
	return p, nil
}
