// Package source provides the policy sets the check endpoint enforces:
// Files reads RateLimitPolicy YAML from a folder (local mode).
package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// Edited is set while an in-memory edit (see Files.Edit) is in force
	// in place of the file's version; EditedAt is when it was made.
	Edited   bool
	EditedAt time.Time
}

// ErrUnknownPolicy is returned by Edit and Revert for a policy that no
// readable file defines.
var ErrUnknownPolicy = errors.New("no such policy in the policy files")

// ErrInvalidEdit wraps the reason an edit was rejected: a value that is
// not a number or duration, or the compile errors of the edited spec,
// each naming its field.
var ErrInvalidEdit = errors.New("edit rejected")

// FileError is a file that could not be read as RateLimitPolicy YAML.
type FileError struct {
	File string
	Err  error
}

// Files serves the RateLimitPolicies in the YAML files under a folder and
// follows edits. A file or policy that does not parse or compile is
// reported and the last good version of each of its policies stays in force.
//
// Besides the files, a policy can be edited in memory (Edit, used by the
// dashboard): the edited spec is in force instead of the file's version
// until that file changes on disk (written, replaced or removed), when the
// file wins again, or until Revert. The files themselves are never written.
type Files struct {
	dir      string
	interval time.Duration
	log      *slog.Logger

	set      atomic.Pointer[policy.Set]
	revision atomic.Int64

	mu         sync.Mutex
	signature  string
	good       map[string]*policy.Policy // "ns/name" -> last good version
	goodFile   map[string]string         // "ns/name" -> the file it came from
	statuses   []PolicyStatus
	fileErrors []FileError
	onChange   []func()

	fileHash map[string]string  // file -> hash of the contents last compiled
	used     map[string]usedDoc // "ns/name" -> the document in use
	edits    map[string]*edit   // "ns/name" -> in-memory edit in force
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
func NewFiles(dir string, interval time.Duration, log *slog.Logger) (*Files, error) {
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
	f := &Files{dir: dir, interval: interval, log: log, good: map[string]*policy.Policy{}, goodFile: map[string]string{},
		fileHash: map[string]string{}, used: map[string]usedDoc{}, edits: map[string]*edit{}, now: time.Now}
	f.set.Store(policy.NewSet(0, nil))
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Policies implements check.Source.
func (f *Files) Policies() *policy.Set { return f.set.Load() }

// Statuses reports every policy seen in the files, ordered by namespace and name.
func (f *Files) Statuses() []PolicyStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PolicyStatus(nil), f.statuses...)
}

// FileErrors reports files that could not be read.
func (f *Files) FileErrors() []FileError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FileError(nil), f.fileErrors...)
}

// OnChange registers a function called after each new policy set.
func (f *Files) OnChange(fn func()) {
	f.mu.Lock()
	f.onChange = append(f.onChange, fn)
	f.mu.Unlock()
}

// Dir is the folder being served.
func (f *Files) Dir() string { return f.dir }

// Run polls the folder until ctx ends. Polling (rather than inotify)
// follows editors that replace files, mounted ConfigMaps that swap
// symlinks, and network filesystems alike.
func (f *Files) Run(ctx context.Context) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f.Reload(); err != nil {
				f.log.Error("reading policies", "dir", f.dir, "err", err)
			}
		}
	}
}

type document struct {
	file string
	spec *ratelimitv1alpha1.RateLimitPolicy
}

// Reload reads the folder and, when anything changed, compiles it and
// swaps the policy set.
func (f *Files) Reload() error { return f.reload(false) }

// Edit changes the policy namespace/name in memory: fn gets a copy of the
// spec in force (the file's, or the previous edit) and changes it. The
// result is compiled; if fn fails or the result does not compile, the
// error (wrapping ErrInvalidEdit, naming the fields) is returned and
// nothing changes. Otherwise the edited version is in force at once, and
// stays until the policy's file changes on disk or Revert is called.
func (f *Files) Edit(namespace, name string, fn func(*ratelimitv1alpha1.RateLimitPolicySpec) error) error {
	id := namespace + "/" + name
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
	f.log.Info("policy edited in memory; the file wins again when it changes", "policy", id, "file", doc.file)
	return f.reload(true)
}

// Revert drops the in-memory edit of namespace/name, putting its file's
// version back in force. Reverting a policy without an edit does nothing.
func (f *Files) Revert(namespace, name string) error {
	id := namespace + "/" + name
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
	f.log.Info("in-memory edit reverted; the file's version is in force", "policy", id)
	return f.reload(true)
}

// reload reads the folder and compiles it when anything changed, or always
// when force is set (after an edit).
func (f *Files) reload(force bool) error {
	files, err := policyFiles(f.dir)
	if err != nil {
		return err
	}
	contents := make(map[string][]byte, len(files))
	h := sha256.New()
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed between listing and reading
			}
			return err
		}
		contents[name] = b
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	sig := string(h.Sum(nil))

	f.mu.Lock()
	defer f.mu.Unlock()
	if sig == f.signature && !force {
		return nil
	}
	f.signature = sig

	fileHash := make(map[string]string, len(contents))
	for name, b := range contents {
		sum := sha256.Sum256(b)
		fileHash[name] = string(sum[:])
	}
	for id, e := range f.edits {
		if fileHash[e.file] != e.fileHash {
			delete(f.edits, id)
			f.log.Info("policy file changed; it replaces the in-memory edit", "policy", id, "file", e.file)
		}
	}

	var (
		docs       []document
		fileErrors []FileError
		statuses   []PolicyStatus
	)
	for _, name := range files {
		b, ok := contents[name]
		if !ok {
			continue
		}
		d, err := parseFile(name, b)
		if err != nil {
			fileErrors = append(fileErrors, FileError{File: name, Err: err})
			f.log.Error("policy file not applied; the last good versions of its policies stay in force", "file", name, "err", err)
		}
		docs = append(docs, d...)
	}

	next := map[string]*policy.Policy{}
	seen := map[string]string{}
	used := map[string]usedDoc{}
	for _, d := range docs {
		ns := d.spec.Namespace
		if ns == "" {
			ns = "default"
		}
		id := ns + "/" + d.spec.Name
		st := PolicyStatus{Namespace: ns, Name: d.spec.Name, File: d.file, Spec: &d.spec.Spec}
		if other, dup := seen[id]; dup {
			st.Message = fmt.Sprintf("policy %s is also defined in %s; that one is used", id, other)
			statuses = append(statuses, st)
			continue
		}
		seen[id] = d.file
		if e := f.edits[id]; e != nil && e.file == d.file {
			st.Spec, st.Edited, st.EditedAt = e.spec, true, e.at
		}
		used[id] = usedDoc{file: d.file, spec: st.Spec}
		p, err := policy.Compile(ns, d.spec.Name, st.Spec)
		if err != nil {
			st.Message = err.Error()
			if old := f.good[id]; old != nil {
				next[id] = old
				st.Message += " (the last good version stays in force)"
			}
			f.log.Error("policy not applied", "policy", id, "file", d.file, "err", err)
		} else {
			st.Ready = true
			next[id] = p
		}
		statuses = append(statuses, st)
	}
	// A file that failed to parse keeps its policies' last good versions.
	nextFile := map[string]string{}
	for id := range next {
		nextFile[id] = seen[id]
	}
	for _, fe := range fileErrors {
		for id, old := range f.good {
			if _, present := next[id]; !present && f.goodFile[id] == fe.File {
				next[id], nextFile[id] = old, fe.File
				statuses = append(statuses, PolicyStatus{Namespace: old.Namespace, Name: old.Name, File: fe.File,
					Message: fmt.Sprintf("its file does not parse: %v (the last good version stays in force)", fe.Err)})
			}
		}
	}
	// Stable: a policy's status from the document in use (the first read)
	// stays ahead of its duplicates'.
	sort.SliceStable(statuses, func(i, j int) bool {
		if statuses[i].Namespace != statuses[j].Namespace {
			return statuses[i].Namespace < statuses[j].Namespace
		}
		return statuses[i].Name < statuses[j].Name
	})

	f.good, f.goodFile = next, nextFile
	f.fileHash, f.used = fileHash, used
	f.statuses = statuses
	f.fileErrors = fileErrors
	list := make([]*policy.Policy, 0, len(next))
	for _, p := range next {
		list = append(list, p)
	}
	f.set.Store(policy.NewSet(f.revision.Add(1), list))
	f.log.Info("policies loaded", "dir", f.dir, "policies", len(list), "revision", f.revision.Load())
	for _, fn := range f.onChange {
		fn()
	}
	return nil
}

// policyFiles lists the YAML and JSON files under dir, sorted.
func policyFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir // editors' and ConfigMaps' hidden folders
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !strings.HasPrefix(d.Name(), ".") {
				files = append(files, p)
			}
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// parseFile reads the RateLimitPolicy documents of one file; documents of
// other kinds (a kustomization.yaml) are skipped. Fields are decoded
// strictly, so a misspelt field is an error rather than silently ignored.
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
		docs = append(docs, document{file: name, spec: &p})
	}
	return docs, nil
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
