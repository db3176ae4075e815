package docs

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/internal/testutil/envtest"
)

// TestExamplesApply applies every example to a real API server: an
// example is accepted, or, marked refused, refused by validation (with
// its message when the marker gives one).
func TestExamplesApply(t *testing.T) {
	root := filepath.Join("..", "..")
	exs, err := allExamples(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(exs) == 0 {
		t.Fatal("no RateLimitPolicy or RateLimitOverrides example in README.md or docs/: the reader would be broken")
	}
	crds, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	env, err := envtest.Start(envtest.Options{CRDDirs: []string{crds}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	namespaces := map[string]bool{}
	for _, ex := range exs {
		t.Run(ex.String(), func(t *testing.T) {
			objs, err := ex.objects()
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				ensureNamespace(t, env.Client, namespaces, obj)
				checkApply(t, env.Client, ex, obj)
			}
		})
	}
}

// ensureNamespace creates the object's namespace ("default" when it
// names none) once.
func ensureNamespace(t *testing.T, c client.Client, made map[string]bool, obj *unstructured.Unstructured) {
	t.Helper()
	if obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	ns := obj.GetNamespace()
	if made[ns] {
		return
	}
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	made[ns] = true
}

// checkApply creates obj in dry run with strict field validation (a field
// the schema does not know is an error, not dropped) and checks the
// answer against what the example says.
func checkApply(t *testing.T, c client.Client, ex example, obj *unstructured.Unstructured) {
	t.Helper()
	err := c.Create(context.Background(), obj, client.DryRunAll, client.FieldValidation("Strict"))
	what := obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
	switch {
	case !ex.refused && err != nil:
		t.Errorf("%s: the API server refuses %s: %v\n(mark the block with <!-- refused --> if that is its point)", ex, what, err)
	case ex.refused && err == nil:
		t.Errorf("%s: marked refused, but the API server accepts %s", ex, what)
	case ex.refused && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
		t.Errorf("%s: marked refused, but %s fails for another reason than validation: %v", ex, what, err)
	case ex.refused && ex.message != "" && !strings.Contains(err.Error(), ex.message):
		t.Errorf("%s: %s is refused, but without %q: %v", ex, what, ex.message, err)
	}
}
