// Package policyfiles is local mode's source of policies: RateLimitPolicy
// YAML files in a folder, followed as they change, with the dashboard's
// in-memory edits. (In a cluster, the check processes read the policy
// table in Redis instead: internal/policytable.)
package policyfiles

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// PolicyStatus is what a source knows about one policy: whether its latest
// version is in force, and if not, why.
type PolicyStatus struct {
	Namespace string
	Name      string
	File      string
	// Ready is true when the latest version compiled and is in force.
	Ready bool
	// Message explains a version that is not in force; the last good
	// version (if any) stays in force meanwhile.
	Message string
	// Spec is the latest version read (also when it does not compile), or
	// the edited version while the policy is Edited.
	Spec *ratelimitv1alpha1.RateLimitPolicySpec
	// Edited is set while an in-memory edit (see Folder.Edit) is in force
	// in place of the file's version; EditedAt is when it was made.
	Edited   bool
	EditedAt time.Time
	// Duplicate is set on a definition that is not applied because another
	// one of the same policy is (see FileErrors); the status of the
	// definition applied comes first.
	Duplicate bool
}

// FileError is a file that could not be read as RateLimitPolicy YAML, or
// whose policies are not all applied: not readable, skipped (not a regular
// file), not parsed, an invalid name, a policy another file also defines,
// or a file that keeps changing.
type FileError struct {
	File string
	Err  error
}

// Folder serves the RateLimitPolicies in the YAML files under a folder and
// follows edits. A file or policy that does not parse or compile is
// reported and the last good version of each of its policies stays in force.
//
// Each file stands on its own: one that cannot be read (a symlink loop or
// a dangling symlink), is not a regular file (a FIFO, socket or device:
// skipped, never opened), or names a policy as the API server would not
// is reported in FileErrors, keeps its policies' last good versions, and
// the other files go on following their edits. A policy defined in two
// places is applied from one of them (see owner) and reported on both. A
// new version of a file applies once the file has stayed unchanged for
// the settle time (the poll interval, at most 1s), so a file caught while
// a writer is between writes is not applied.
//
// Besides the files, a policy can be edited in memory (Edit, used by the
// dashboard): the edited spec is in force instead of the file's version
// until that file changes on disk (written, replaced or removed), when the
// file wins again, or until Revert. The files themselves are never written.
type Folder struct {
	dir      string
	interval time.Duration
	log      *slog.Logger

	set      atomic.Pointer[policy.Set]
	revision atomic.Int64

	// reloadMu makes reloads one at a time; files is theirs.
	reloadMu sync.Mutex
	files    map[string]*fileState
	// settle is how long a file must stay unchanged before a new version
	// of it applies.
	settle time.Duration
	// afterRead, when set (by tests), runs between reading a file and the
	// stat that checks it did not change meanwhile.
	afterRead func(path string)

	mu         sync.Mutex
	signature  string
	good       *policy.LastGood[policyID, *policy.Policy]
	goodFile   map[policyID]string // the file each last good version is in force from
	statuses   []PolicyStatus
	fileErrors []FileError
	// overrides are the RateLimitOverrides documents by file; a file that
	// cannot be read or parsed keeps its last ones.
	overrides map[string][]*ratelimitv1alpha1.RateLimitOverrides
	// compileErrs are the compile errors last logged, so each is logged once.
	compileErrs map[policyID]string
	onChange    []func()

	fileHash map[string]string    // file -> hash of the contents last compiled
	used     map[policyID]usedDoc // the document in use
	edits    map[policyID]*edit   // in-memory edit in force
	now      func() time.Time
}

// usedDoc is the document a policy's status comes from.
type usedDoc struct {
	file string
	spec *ratelimitv1alpha1.RateLimitPolicySpec
}

// NewFolder reads dir once; Run follows it.
func NewFolder(dir string, interval time.Duration, log *slog.Logger) (*Folder, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("policies folder: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("policies folder: %s is not a folder", dir)
	}
	f := &Folder{dir: dir, interval: interval, log: log, files: map[string]*fileState{}, settle: min(interval, time.Second),
		good: policy.NewLastGood[policyID, *policy.Policy](), goodFile: map[policyID]string{},
		fileHash: map[string]string{}, used: map[policyID]usedDoc{}, edits: map[policyID]*edit{}, now: time.Now}
	f.set.Store(policy.NewSet(0, nil))
	if err := f.Reload(); err != nil {
		return nil, err
	}
	// Files written just before the start are given the settle time, so
	// the process does not start on a half-written one.
	for range 5 {
		if !f.unsettled() {
			break
		}
		time.Sleep(f.settle)
		if err := f.Reload(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Policies implements check.Source.
func (f *Folder) Policies() *policy.Set { return f.set.Load() }

// Statuses reports every policy seen in the files, ordered by namespace and name.
func (f *Folder) Statuses() []PolicyStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PolicyStatus(nil), f.statuses...)
}

// FileErrors reports, per file, what keeps its policies from being applied
// in full, sorted by file.
func (f *Folder) FileErrors() []FileError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FileError(nil), f.fileErrors...)
}

// Overrides are the RateLimitOverrides documents of the files, in file
// order. The objects are shared: do not change them.
func (f *Folder) Overrides() []*ratelimitv1alpha1.RateLimitOverrides {
	f.mu.Lock()
	defer f.mu.Unlock()
	files := slices.Sorted(maps.Keys(f.overrides))
	var out []*ratelimitv1alpha1.RateLimitOverrides
	for _, file := range files {
		out = append(out, f.overrides[file]...)
	}
	return out
}

// OnChange registers a function called after each new policy set.
func (f *Folder) OnChange(fn func()) {
	f.mu.Lock()
	f.onChange = append(f.onChange, fn)
	f.mu.Unlock()
}

// Dir is the folder being served.
func (f *Folder) Dir() string { return f.dir }

// Run polls the folder until ctx ends. Polling (rather than inotify)
// follows editors that replace files, mounted ConfigMaps that swap
// symlinks, and network filesystems alike. A folder that cannot be read
// is logged when that starts and when it ends, not at every poll.
func (f *Folder) Run(ctx context.Context) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	var failing string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := f.Reload()
			switch {
			case err != nil && err.Error() != failing:
				failing = err.Error()
				f.log.Error("policies folder cannot be read; the policies in force stay", "dir", f.dir, "err", err)
			case err == nil && failing != "":
				failing = ""
				f.log.Info("policies folder readable again", "dir", f.dir)
			}
		}
	}
}

// Reload reads the folder and, when anything changed, compiles it and
// swaps the policy set.
func (f *Folder) Reload() error { return f.reload(false) }

// reload reads the folder and compiles it when anything changed, or always
// when force is set (after an edit). Each file is read and reported on its
// own: one that cannot be read keeps its policies' last good versions and
// the others follow their edits. The OnChange functions run after the new
// set is in place, outside f.mu, so they may read the statuses.
func (f *Folder) reload(force bool) error {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	r, err := f.read()
	if err != nil {
		return err
	}
	for _, fn := range f.apply(r, force) {
		fn()
	}
	return nil
}

// apply compiles r into a new policy set unless nothing changed (and force
// is not set), and returns the OnChange functions to call then.
func (f *Folder) apply(r *folderRead, force bool) []func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.signature == f.signature && !force {
		return nil
	}
	f.signature = r.signature

	fileHash := make(map[string]string, len(r.contents))
	for name, v := range r.contents {
		fileHash[name] = string(v.hash[:])
	}
	f.dropStaleEdits(fileHash)

	kept := f.unreadable(r)
	n := &nextSet{inForce: map[policyID]*policy.Policy{}, inForceFile: map[policyID]string{},
		used: map[policyID]usedDoc{}, compileErrs: map[policyID]string{}, dupNote: map[policyID]string{},
		fileErrors: append([]FileError(nil), r.readErrs...), overrides: map[string][]*ratelimitv1alpha1.RateLimitOverrides{}}
	defs, order := f.definitions(r, kept, n)
	for file := range kept.why {
		if o, ok := f.overrides[file]; ok {
			n.overrides[file] = o
		}
	}
	f.overrides = n.overrides
	for _, id := range order {
		f.resolve(id, defs[id], kept, n)
	}
	f.keepUnreadable(kept, n)
	sortReports(n)
	f.logNewFileErrors(n.fileErrors)

	for id, p := range n.inForce {
		f.good.Accept(id, p)
	}
	f.good.Retain(func(id policyID) bool { return n.inForce[id] != nil })
	f.goodFile = n.inForceFile
	f.compileErrs = n.compileErrs
	f.fileHash, f.used = fileHash, n.used
	f.statuses = n.statuses
	f.fileErrors = n.fileErrors
	list := make([]*policy.Policy, 0, len(n.inForce))
	for _, p := range n.inForce {
		list = append(list, p)
	}
	f.set.Store(policy.NewSet(f.revision.Add(1), list))
	f.log.Info("policies loaded", "dir", f.dir, "policies", len(list), "revision", f.revision.Load())
	return append([]func(){}, f.onChange...)
}

// logNewFileErrors logs each file error once, when it appears: not at
// every poll, nor again when another file changes.
func (f *Folder) logNewFileErrors(fileErrors []FileError) {
	logged := make(map[string]bool, len(f.fileErrors))
	for _, fe := range f.fileErrors {
		logged[fe.File+"\x00"+fe.Err.Error()] = true
	}
	for _, fe := range fileErrors {
		if !logged[fe.File+"\x00"+fe.Err.Error()] {
			f.log.Error("policy file not applied in full; the last good versions of its policies stay in force",
				"file", fe.File, "err", fe.Err)
		}
	}
}

// rel names a file relative to the folder, as a person editing it would.
func (f *Folder) rel(file string) string {
	if r, err := filepath.Rel(f.dir, file); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return file
}
