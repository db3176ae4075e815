// Package source provides the policy sets the check endpoint enforces:
// Files reads RateLimitPolicy YAML from a folder (local mode).
package policyfiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

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

// policyID names a policy. A struct rather than "namespace/name": names
// are checked as the API server checks them, and the key does not depend
// on that.
type policyID struct{ namespace, name string }

func (id policyID) String() string { return id.namespace + "/" + id.name }

// ErrUnknownPolicy is returned by Edit and Revert for a policy that no
// readable file defines.
var ErrUnknownPolicy = errors.New("no such policy in the policy files")

// ErrInvalidEdit wraps the reason an edit was rejected: a value that is
// not a number or duration, or the compile errors of the edited spec,
// each naming its field.
var ErrInvalidEdit = errors.New("edit rejected")

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

// edit is an in-memory version of a policy that replaces its file's
// version while the file's contents stay as they were when it was made.
type edit struct {
	file     string
	fileHash string
	spec     *ratelimitv1alpha1.RateLimitPolicySpec
	at       time.Time
}

// NewFiles reads dir once; Run follows it.
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

type document struct {
	file  string
	index int // 1-based, among the file's YAML documents
	spec  *ratelimitv1alpha1.RateLimitPolicy
}

// id is the policy's name, the namespace defaulted as kubectl does.
func (d document) id() policyID {
	ns := d.spec.Namespace
	if ns == "" {
		ns = "default"
	}
	return policyID{namespace: ns, name: d.spec.Name}
}

// Reload reads the folder and, when anything changed, compiles it and
// swaps the policy set.
func (f *Folder) Reload() error { return f.reload(false) }

// Edit changes the policy namespace/name in memory: fn gets a copy of the
// spec in force (the file's, or the previous edit) and changes it. The
// result is compiled; if fn fails or the result does not compile, the
// error (wrapping ErrInvalidEdit, naming the fields) is returned and
// nothing changes. Otherwise the edited version is in force at once, and
// stays until the policy's file changes on disk or Revert is called.
func (f *Folder) Edit(namespace, name string, fn func(*ratelimitv1alpha1.RateLimitPolicySpec) error) error {
	id := policyID{namespace, name}
	f.mu.Lock()
	doc, ok := f.used[id]
	if !ok {
		f.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownPolicy, id)
	}
	spec := doc.spec.DeepCopy()
	if err := fn(spec); err != nil {
		f.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrInvalidEdit, err)
	}
	if _, err := policy.Compile(namespace, name, spec); err != nil {
		f.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrInvalidEdit, err)
	}
	// Tied to the contents this process last read: if the file has changed
	// since, the next reload finds a different hash and the file wins.
	f.edits[id] = &edit{file: doc.file, fileHash: f.fileHash[doc.file], spec: spec, at: f.now()}
	f.mu.Unlock()
	f.log.Info("policy edited in memory; the file wins again when it changes", "policy", id.String(), "file", doc.file)
	return f.reload(true)
}

// Revert drops the in-memory edit of namespace/name, putting its file's
// version back in force. Reverting a policy without an edit does nothing.
func (f *Folder) Revert(namespace, name string) error {
	id := policyID{namespace, name}
	f.mu.Lock()
	_, edited := f.edits[id]
	_, known := f.used[id]
	delete(f.edits, id)
	f.mu.Unlock()
	if !edited {
		if !known {
			return fmt.Errorf("%w: %s", ErrUnknownPolicy, id)
		}
		return nil
	}
	f.log.Info("in-memory edit reverted; the file's version is in force", "policy", id.String())
	return f.reload(true)
}

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

// folderRead is one reading of the folder.
type folderRead struct {
	entries  []entry
	contents map[string]*version // by path; nil for a file not read
	dirErrs  []FileError         // folders that cannot be listed
	readErrs []FileError         // dirErrs and the files that cannot be read
	// signature changes whenever a file's contents or error does.
	signature string
}

func (f *Folder) read() (*folderRead, error) {
	entries, dirErrs, err := listFiles(f.dir)
	if err != nil {
		return nil, err
	}
	contents, readErrs := f.readAll(entries, f.now())
	r := &folderRead{entries: entries, contents: contents, dirErrs: dirErrs, readErrs: append(dirErrs, readErrs...)}
	h := sha256.New()
	for _, e := range entries {
		if v := contents[e.path]; v != nil {
			fmt.Fprintf(h, "%s\x00%x\x00", e.path, v.hash)
		}
	}
	for _, fe := range r.readErrs {
		fmt.Fprintf(h, "%s\x00error\x00%v\x00", fe.File, fe.Err)
	}
	r.signature = string(h.Sum(nil))
	return r, nil
}

// nextSet is what one reload builds: the policies in force and what is
// reported about them.
type nextSet struct {
	inForce     map[policyID]*policy.Policy
	inForceFile map[policyID]string
	used        map[policyID]usedDoc
	statuses    []PolicyStatus
	fileErrors  []FileError
	compileErrs map[policyID]string
	// dupNote tells a policy's status where else it is defined.
	dupNote map[policyID]string
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
		fileErrors: append([]FileError(nil), r.readErrs...)}
	defs, order := f.definitions(r, kept, n)
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

// dropStaleEdits drops the in-memory edits whose file has changed since:
// the file wins again.
func (f *Folder) dropStaleEdits(fileHash map[string]string) {
	for id, e := range f.edits {
		if fileHash[e.file] != e.fileHash {
			delete(f.edits, id)
			f.log.Info("policy file changed; it replaces the in-memory edit", "policy", id.String(), "file", e.file)
		}
	}
}

// keptFiles are the files whose policies cannot be known this time (not
// readable, not parsed, or in a folder that cannot be listed): they keep
// their policies' last good versions.
type keptFiles struct {
	why     map[string]string // file -> why, for statuses
	dirErrs []FileError
	rel     func(string) string
}

// unreadable is r's files that could not be read.
func (f *Folder) unreadable(r *folderRead) *keptFiles {
	k := &keptFiles{why: map[string]string{}, dirErrs: r.dirErrs, rel: f.rel}
	for _, fe := range r.readErrs {
		if r.contents[fe.File] == nil {
			k.why[fe.File] = fmt.Sprintf("its file cannot be read: %v", fe.Err)
		}
	}
	return k
}

// reason says why file's policies are kept; false when they are not.
func (k *keptFiles) reason(file string) (string, bool) {
	if why, ok := k.why[file]; ok {
		return why, true
	}
	for _, de := range k.dirErrs {
		if strings.HasPrefix(file, de.File+string(filepath.Separator)) {
			return fmt.Sprintf("its folder %s cannot be read: %v", k.rel(de.File), de.Err), true
		}
	}
	return "", false
}

// definitions parses the files read: every definition of each policy, and
// the policies in file order. A file that does not parse is reported and
// kept.
func (f *Folder) definitions(r *folderRead, kept *keptFiles, n *nextSet) (map[policyID][]document, []policyID) {
	defs := map[policyID][]document{}
	var order []policyID
	for _, e := range r.entries {
		v := r.contents[e.path]
		if v == nil {
			continue
		}
		d, err := parseFile(e.path, v.data)
		if err != nil {
			n.fileErrors = append(n.fileErrors, FileError{File: e.path, Err: err})
			kept.why[e.path] = fmt.Sprintf("its file does not parse: %v", err)
			continue
		}
		for _, doc := range d {
			id := doc.id()
			if defs[id] == nil {
				order = append(order, id)
			}
			defs[id] = append(defs[id], doc)
		}
	}
	return defs, order
}

// resolve decides which of id's definitions ds is applied, reports the
// others as duplicates, and compiles the one applied (or its in-memory
// edit): when it does not compile, the last good version stays in force.
func (f *Folder) resolve(id policyID, ds []document, kept *keptFiles, n *nextSet) {
	owner, keptOwner := f.owner(id, ds, kept.reason)
	f.reportDuplicates(id, ds, owner, keptOwner, n)
	if keptOwner {
		return // its status comes with the other kept policies
	}
	d := ds[owner]
	st := PolicyStatus{Namespace: id.namespace, Name: id.name, File: d.file, Spec: &d.spec.Spec}
	if e := f.edits[id]; e != nil && e.file == d.file {
		st.Spec, st.Edited, st.EditedAt = e.spec, true, e.at
	}
	n.used[id] = usedDoc{file: d.file, spec: st.Spec}
	p, err := policy.Compile(id.namespace, id.name, st.Spec)
	inForce, ok := f.good.InForce(id, p, err)
	if ok {
		n.inForce[id], n.inForceFile[id] = inForce, d.file
	}
	if err != nil {
		st.Message = err.Error()
		if ok {
			st.Message += " (the last good version stays in force)"
		}
		n.compileErrs[id] = err.Error()
		if f.compileErrs[id] != err.Error() {
			f.log.Error("policy not applied", "policy", id.String(), "file", d.file, "err", err)
		}
	} else {
		st.Ready = true
	}
	if note := n.dupNote[id]; note != "" {
		// In force, but not Ready: which definition counts is in doubt.
		st.Ready = false
		st.Message = joinMessages(st.Message, note)
	}
	n.statuses = append(n.statuses, st)
}

// reportDuplicates reports every definition of id but the owner's as not
// applied, on its file and in its own status.
func (f *Folder) reportDuplicates(id policyID, ds []document, owner int, keptOwner bool, n *nextSet) {
	ownerFile := f.goodFile[id]
	if !keptOwner {
		ownerFile = ds[owner].file
	}
	var others []string
	for i, d := range ds {
		if i == owner && !keptOwner {
			continue
		}
		others = append(others, f.rel(d.file))
		var err error
		switch {
		case d.file == ownerFile && !keptOwner:
			err = fmt.Errorf("policy %s is defined twice in this file (documents %d and %d); document %d is the one applied",
				id, ds[owner].index, d.index, ds[owner].index)
		case keptOwner:
			err = fmt.Errorf("policy %s is also defined in %s, whose last good version stays in force; this definition is not applied",
				id, f.rel(ownerFile))
		default:
			err = fmt.Errorf("policy %s is also defined in %s, whose definition is in force; this one is not applied",
				id, f.rel(ownerFile))
		}
		n.fileErrors = append(n.fileErrors, FileError{File: d.file, Err: err})
		n.statuses = append(n.statuses, PolicyStatus{Namespace: id.namespace, Name: id.name, File: d.file,
			Spec: &d.spec.Spec, Duplicate: true, Message: err.Error()})
	}
	if len(others) > 0 {
		n.dupNote[id] = fmt.Sprintf("also defined in %s, where it is not applied: keep one definition",
			strings.Join(others, ", "))
	}
}

// keepUnreadable keeps in force the last good version of each policy whose
// file cannot be read or parsed this time.
func (f *Folder) keepUnreadable(kept *keptFiles, n *nextSet) {
	for id, file := range f.goodFile {
		if _, present := n.inForce[id]; present {
			continue
		}
		why, ok := kept.reason(file)
		if !ok {
			continue
		}
		n.inForce[id], _ = f.good.Get(id)
		n.inForceFile[id] = file
		n.statuses = append(n.statuses, PolicyStatus{Namespace: id.namespace, Name: id.name, File: file,
			Message: joinMessages(why+" (the last good version stays in force)", n.dupNote[id])})
	}
}

// sortReports orders statuses by policy, the definition in use ahead of
// its duplicates, and file errors by file.
func sortReports(n *nextSet) {
	sort.SliceStable(n.statuses, func(i, j int) bool {
		a, b := n.statuses[i], n.statuses[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return !a.Duplicate && b.Duplicate
	})
	sort.SliceStable(n.fileErrors, func(i, j int) bool { return n.fileErrors[i].File < n.fileErrors[j].File })
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

// owner picks the definition of id that is applied among ds (in file
// order). A policy in force keeps coming from the file it came from while
// that file still defines it, or while that file cannot be read or parsed
// (keptOwner: its last good version stays); otherwise the first definition
// wins. So adding a second definition never changes which one is enforced.
func (f *Folder) owner(id policyID, ds []document, keptWhy func(string) (string, bool)) (owner int, keptOwner bool) {
	if _, ok := f.good.Get(id); !ok {
		return 0, false
	}
	incumbent := f.goodFile[id]
	if _, ok := keptWhy(incumbent); ok {
		return -1, true
	}
	for i, d := range ds {
		if d.file == incumbent {
			return i, false
		}
	}
	return 0, false
}

func joinMessages(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// rel names a file relative to the folder, as a person editing it would.
func (f *Folder) rel(file string) string {
	if r, err := filepath.Rel(f.dir, file); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return file
}

// parseFile reads the RateLimitPolicy documents of one file; documents of
// other kinds (a kustomization.yaml) are skipped. Fields are decoded
// strictly, so a misspelled field is an error rather than silently ignored.
func parseFile(name string, b []byte) ([]document, error) {
	var docs []document
	for i, raw := range splitDocuments(b) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if meta.Kind != "RateLimitPolicy" {
			continue
		}
		if meta.APIVersion != ratelimitv1alpha1.GroupVersion.String() {
			return nil, fmt.Errorf("document %d: apiVersion %q: want %s", i+1, meta.APIVersion, ratelimitv1alpha1.GroupVersion)
		}
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := yaml.UnmarshalStrict(raw, &p); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("document %d: metadata.name: required", i+1)
		}
		if err := validateNames(&p); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		docs = append(docs, document{file: name, index: i + 1, spec: &p})
	}
	return docs, nil
}

// validateNames checks metadata.name and metadata.namespace as the API
// server does for a namespaced custom resource: the name a DNS subdomain,
// the namespace a DNS label. A file must not hold a policy the cluster
// would refuse (nor one whose name, holding a "/", reads as another's).
func validateNames(p *ratelimitv1alpha1.RateLimitPolicy) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1123Subdomain(p.Name) {
		errs = append(errs, field.Invalid(meta.Child("name"), p.Name, msg))
	}
	if p.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(p.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), p.Namespace, msg))
		}
	}
	return errs.ToAggregate()
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(cur.Bytes())) > 0 {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}
