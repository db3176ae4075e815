package policyfiles

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

const bucketPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: shop
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 10s}
`

// written is the modification time writeFile gives: long enough ago that
// a version applies at the next read (see Folder.settle).
var written = time.Now().Add(-time.Hour)

// writeFile writes a policy file as a writer that finished a while ago.
func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	writeFileAt(t, dir, name, body, written)
}

func writeFileAt(t *testing.T, dir, name, body string, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newFiles(t *testing.T, files map[string]string) (*Folder, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		writeFile(t, dir, name, body)
	}
	f, err := NewFolder(dir, 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return f, dir
}

func capacity(t *testing.T, f *Folder) int64 {
	t.Helper()
	p := f.Policies().Get("shop", "api")
	if p == nil {
		t.Fatal("policy shop/api not in force")
	}
	return p.Limits[0].Limit.Capacity
}

func status(t *testing.T, f *Folder) PolicyStatus {
	t.Helper()
	for _, st := range f.Statuses() {
		if st.Namespace == "shop" && st.Name == "api" {
			return st
		}
	}
	t.Fatal("no status for shop/api")
	return PolicyStatus{}
}

func setCapacity(n ratelimitv1alpha1.Count) func(*ratelimitv1alpha1.RateLimitPolicySpec) error {
	return func(s *ratelimitv1alpha1.RateLimitPolicySpec) error {
		s.Limits[0].TokenBucket.Capacity = n
		return nil
	}
}

func TestEditAppliesAtOnceUntilTheFileChanges(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	rev := f.Policies().Revision
	if err := f.Edit("shop", "api", setCapacity(10)); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 10 {
		t.Fatalf("capacity after the edit: %d, want 10", got)
	}
	if f.Policies().Revision == rev {
		t.Fatal("an edit must publish a new policy set (which also drops the deny cache)")
	}
	st := status(t, f)
	if !st.Ready || !st.Edited || st.EditedAt.IsZero() || st.Spec.Limits[0].TokenBucket.Capacity != 10 {
		t.Fatalf("status after the edit: %+v", st)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "api.yaml"))
	if string(b) != bucketPolicy {
		t.Fatal("an edit must not write the file")
	}

	// A reload with the file unchanged keeps the edit.
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 10 {
		t.Fatalf("capacity after a reload of an unchanged file: %d, want 10", got)
	}

	// Edits build on the previous edit.
	if err := f.Edit("shop", "api", func(s *ratelimitv1alpha1.RateLimitPolicySpec) error {
		s.Limits[0].TokenBucket.RefillRate = 2
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if p := f.Policies().Get("shop", "api"); p.Limits[0].Limit.Capacity != 10 || p.Limits[0].Limit.Rate != 2 {
		t.Fatalf("second edit: %v", p.Limits[0].Limit)
	}

	// The file changes on disk: it wins, and the edit is gone.
	writeFile(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 7", 1))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 7 {
		t.Fatalf("capacity after the file changed: %d, want the file's 7", got)
	}
	if st := status(t, f); st.Edited {
		t.Fatalf("the edit must be dropped when the file changes: %+v", st)
	}
}

func TestBadEditIsRejectedAndTheLastGoodVersionStays(t *testing.T) {
	f, _ := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	if err := f.Edit("shop", "api", setCapacity(8)); err != nil {
		t.Fatal(err)
	}
	rev := f.Policies().Revision

	err := f.Edit("shop", "api", setCapacity(0))
	if !errors.Is(err, ErrInvalidEdit) {
		t.Fatalf("capacity 0: err %v, want ErrInvalidEdit", err)
	}
	if !strings.Contains(err.Error(), "spec.limits[0].tokenBucket.capacity") {
		t.Fatalf("the error must name the field: %v", err)
	}
	if got := capacity(t, f); got != 8 {
		t.Fatalf("capacity after a rejected edit: %d, want the last good 8", got)
	}
	if f.Policies().Revision != rev {
		t.Fatal("a rejected edit must not publish a new policy set")
	}
	if st := status(t, f); !st.Ready || !st.Edited || st.Message != "" || st.Spec.Limits[0].TokenBucket.Capacity != 8 {
		t.Fatalf("status after a rejected edit: %+v", st)
	}

	// The edit function's own error is rejected the same way.
	err = f.Edit("shop", "api", func(*ratelimitv1alpha1.RateLimitPolicySpec) error {
		return errors.New("spec.limits[0].tokenBucket.capacity: not a number")
	})
	if !errors.Is(err, ErrInvalidEdit) || capacity(t, f) != 8 {
		t.Fatalf("failing edit function: %v", err)
	}

	if err := f.Edit("shop", "missing", setCapacity(3)); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
}

func TestRevertPutsTheFileBack(t *testing.T) {
	f, _ := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	if err := f.Edit("shop", "api", setCapacity(9)); err != nil {
		t.Fatal(err)
	}
	if err := f.Revert("shop", "api"); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("capacity after revert: %d, want the file's 5", got)
	}
	if st := status(t, f); st.Edited {
		t.Fatalf("status after revert: %+v", st)
	}
	if err := f.Revert("shop", "api"); err != nil {
		t.Fatalf("reverting twice: %v", err)
	}
	if err := f.Revert("shop", "missing"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
}

func TestPoliciesKeptFromABrokenFileHaveAStatus(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	writeFile(t, dir, "api.yaml", "kind: RateLimitPolicy\nspec: [")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("the last good version must stay: capacity %d", got)
	}
	st := status(t, f)
	if st.Ready || !strings.Contains(st.Message, "does not parse") || !strings.Contains(st.Message, "last good version stays in force") {
		t.Fatalf("status of a policy kept from a broken file: %+v", st)
	}
	// Its spec is unknown: it cannot be edited until the file parses.
	if err := f.Edit("shop", "api", setCapacity(3)); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("editing a policy whose file does not parse: %v", err)
	}
}

// OnChange functions run once the new set is in place and outside the
// lock, so one may read what changed.
func TestOnChangeMayReadTheNewStatuses(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	var seen []PolicyStatus
	f.OnChange(func() { seen = f.Statuses() })
	writeFile(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 0", 1))
	done := make(chan error, 1)
	go func() { done <- f.Reload() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reload did not return: OnChange ran under the lock Statuses takes")
	}
	if len(seen) != 1 || seen[0].Ready || !strings.Contains(seen[0].Message, "last good version stays in force") {
		t.Fatalf("OnChange saw %+v, want the new version's error", seen)
	}
}
