package policyfiles

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/crdschema"
	"github.com/sluice-dev/sluice/internal/manifest"
	"github.com/sluice-dev/sluice/internal/policy"
)

// ErrUnknownPolicy is returned by Edit and Revert for a policy that no
// readable file defines.
var ErrUnknownPolicy = errors.New("no such policy in the policy files")

// ErrInvalidEdit wraps the reason an edit was rejected: a value that is
// not a number or duration, or the compile errors of the edited spec,
// each naming its field.
var ErrInvalidEdit = errors.New("edit rejected")

// edit is an in-memory version of a policy that replaces its file's
// version while the file's contents stay as they were when it was made.
type edit struct {
	file     string
	fileHash string
	spec     *ratelimitv1alpha1.RateLimitPolicySpec
	at       time.Time
}

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
	if err := admitSpec(namespace, name, spec); err != nil {
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

// admitSpec checks an edited spec against the CRD schema as the API server
// checks an update, and fills in the schema's defaults.
func admitSpec(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) error {
	schema, err := crdschema.Shared()
	if err != nil {
		return err
	}
	p := &ratelimitv1alpha1.RateLimitPolicy{Spec: *spec}
	p.APIVersion, p.Kind = ratelimitv1alpha1.GroupVersion.String(), manifest.KindPolicy
	p.Namespace, p.Name = namespace, name
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return err
	}
	if err := schema.Admit(context.Background(), obj); err != nil {
		return err
	}
	var admitted ratelimitv1alpha1.RateLimitPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &admitted); err != nil {
		return err
	}
	*spec = admitted.Spec
	return nil
}
