package policyfiles

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// A version of a file that the API server would refuse (a window of 1.5s,
// which Go's time.ParseDuration reads) is not applied: its status names
// the document and the field in the API server's words, and the last good
// version stays in force; a good policy beside it in the file applies.
func TestVersionTheSchemaRefusesKeepsTheLastGood(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	other := strings.Replace(bucketPolicy, "name: api", "name: other", 1)
	invalid := strings.Replace(bucketPolicy, "tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 10s}",
		"fixedWindow: {limit: 7, window: 1.5s}", 1)
	writeFile(t, dir, "api.yaml", other+"---\n"+invalid)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("capacity %d, want the last good 5", got)
	}
	st := status(t, f)
	want := `document 2: spec.limits[0].fixedWindow.window: Invalid value: "1.5s": must be a duration such as 500ms, 1s, 1m30s or 24h`
	if st.Ready || !strings.Contains(st.Message, want) || !strings.Contains(st.Message, "the last good version stays in force") {
		t.Fatalf("status %+v: want not ready, with %q", st, want)
	}
	if f.Policies().Get("shop", "other") == nil {
		t.Fatal("the valid policy of the same file is not in force")
	}
}

// An in-memory edit is checked against the schema too.
func TestEditTheSchemaRefusesIsRejected(t *testing.T) {
	f, _ := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	err := f.Edit("shop", "api", func(s *ratelimitv1alpha1.RateLimitPolicySpec) error {
		s.Match.Hosts = []ratelimitv1alpha1.HostMatch{"-a.com"}
		return nil
	})
	if !errors.Is(err, ErrInvalidEdit) || !strings.Contains(err.Error(), "spec.match.hosts[0]: Invalid value") {
		t.Fatalf("err = %v, want an invalid edit naming spec.match.hosts[0]", err)
	}
	if st := status(t, f); !st.Ready || st.Edited {
		t.Fatalf("status after a rejected edit: %+v", st)
	}
}

// RateLimitOverrides the API server would refuse (a number of 0) are
// refused alone, as `kubectl apply -f` refuses that object and creates the
// file's others: the policy of the same file applies from the first read,
// the file's errors name the document and the field, and an object's last
// good version stays when a new version of it is refused.
func TestOverridesTheSchemaRefusesAreRefusedAlone(t *testing.T) {
	overridesDoc := func(limit int) string {
		return "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitOverrides\nmetadata: {name: tenants, namespace: shop}\n" +
			"spec:\n  policyName: api\n  overrides: [{key: acme, limits: [{name: burst, limit: " + strconv.Itoa(limit) + "}]}]\n"
	}
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy + "---\n" + overridesDoc(0)})
	if f.Policies().Get("shop", "api") == nil {
		t.Fatal("the policy beside refused RateLimitOverrides is not in force")
	}
	want := "document 2: RateLimitOverrides shop/tenants not applied (it has no last good version): spec.overrides[0].limits[0].limit"
	if errs := f.FileErrors(); len(errs) != 1 || !strings.Contains(errs[0].Err.Error(), want) {
		t.Fatalf("file errors %v: want one with %q", errs, want)
	}
	if got := f.Overrides(); len(got) != 0 {
		t.Fatalf("overrides in force %d, want none", len(got))
	}

	writeFile(t, dir, "api.yaml", bucketPolicy+"---\n"+overridesDoc(3))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := f.Overrides(); len(got) != 1 || got[0].Spec.Overrides[0].Limits[0].Limit != 3 || len(f.FileErrors()) != 0 {
		t.Fatalf("overrides %+v, file errors %v: want the valid version, no error", got, f.FileErrors())
	}
	writeFile(t, dir, "api.yaml", bucketPolicy+"---\n"+overridesDoc(0))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := f.Overrides(); len(got) != 1 || got[0].Spec.Overrides[0].Limits[0].Limit != 3 {
		t.Fatalf("overrides %+v: want the last good version (3)", got)
	}
	if errs := f.FileErrors(); len(errs) != 1 || !strings.Contains(errs[0].Err.Error(), "its last good version stays") {
		t.Fatalf("file errors %v: want the refusal, the last good version kept", errs)
	}
}
