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
	// Spec is the latest version read (also when it does not compile).
	Spec *ratelimitv1alpha1.RateLimitPolicySpec
}

// FileError is a file that could not be read as RateLimitPolicy YAML.
type FileError struct {
	File string
	Err  error
}

// Files serves the RateLimitPolicies in the YAML files under a folder and
// follows edits. A file or policy that does not parse or compile is
// reported and the last good version of each of its policies stays in force.
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
	f := &Files{dir: dir, interval: interval, log: log, good: map[string]*policy.Policy{}, goodFile: map[string]string{}}
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
func (f *Files) Reload() error {
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
	if sig == f.signature {
		return nil
	}
	f.signature = sig

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
		p, err := policy.Compile(ns, d.spec.Name, &d.spec.Spec)
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
			}
		}
	}
	sort.Slice(statuses, func(i, j int) bool {
		if statuses[i].Namespace != statuses[j].Namespace {
			return statuses[i].Namespace < statuses[j].Namespace
		}
		return statuses[i].Name < statuses[j].Name
	})

	f.good, f.goodFile = next, nextFile
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
