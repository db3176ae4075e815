package manifest

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const policyDoc = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api, namespace: shop}
spec:
  limits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]
`

func TestReadsTheAPIsDocumentsAndSkipsOthers(t *testing.T) {
	stream := "# only a comment\n---\n" + policyDoc + "--- # the overrides\n" +
		"apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitOverrides\nmetadata: {name: o}\nspec: {policyName: api, overrides: [{key: a, limits: [{name: l, limit: 2}]}]}\n" +
		"---\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n"
	docs, err := Read(context.Background(), []byte(stream), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].Policy == nil || docs[1].Overrides == nil {
		t.Fatalf("docs %+v: want the policy and the overrides", docs)
	}
	if docs[0].Index != 2 || docs[0].Name() != "api" || docs[0].Namespace() != "shop" || docs[1].Index != 3 || docs[1].Namespace() != "" {
		t.Fatalf("docs %+v", docs)
	}
	if got := docs[0].Policy.Spec.Limits[0].FixedWindow.Window; got != "1m" || docs[0].Invalid != nil {
		t.Fatalf("window %q, invalid %v", got, docs[0].Invalid)
	}
}

func TestUnknownFieldsAreNamedByTheirPath(t *testing.T) {
	docs, err := Read(context.Background(), []byte(strings.Replace(policyDoc, "window: 1m", "window: 1m, size: 2", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `strict decoding error: unknown field "spec.limits[0].fixedWindow.size"`; len(docs) != 1 || docs[0].Invalid == nil || docs[0].Invalid.Error() != want {
		t.Fatalf("docs %+v, want one invalid with %q", docs, want)
	}
}

// A key given twice is refused, as the API server's strict field
// validation refuses it, rather than one of the two values being used.
func TestAKeyTwiceIsRefused(t *testing.T) {
	for name, doc := range map[string]string{
		"flow":  strings.Replace(policyDoc, "window: 1m", "window: 1m, window: 1s", 1),
		"block": strings.Replace(policyDoc, "spec:\n", "spec:\n  key: a\n  key: b\n", 1),
	} {
		_, err := Read(context.Background(), []byte(doc), nil)
		if err == nil || !strings.Contains(err.Error(), "already set in map") {
			t.Errorf("%s: err %v; want the key named as set twice", name, err)
		}
	}
}

func TestAdmissionRunsBeforeDecodingAndItsDefaultsStay(t *testing.T) {
	refused := errors.New("refused")
	admit := func(_ context.Context, obj map[string]any) error {
		obj["spec"].(map[string]any)["cost"] = int64(2)
		return refused
	}
	docs, err := Read(context.Background(), []byte(policyDoc), admit)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || !errors.Is(docs[0].Invalid, refused) || docs[0].Policy.Spec.Cost != 2 {
		t.Fatalf("docs %+v: want the admission's error and its default", docs)
	}
}

func TestStreamsThatAreNotManifests(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"no kind", "a: 1\n", "document 1: kind: Required value"},
		{"another version", strings.Replace(policyDoc, "v1alpha1", "v1", 1), `document 1: apiVersion "ratelimit.sluice.dev/v1": want ratelimit.sluice.dev/v1alpha1`},
		{"no name", strings.Replace(policyDoc, "name: api, ", "", 1), "document 1: metadata.name: Required value"},
		{"a name with a slash", strings.Replace(policyDoc, "name: api", "name: a/b", 1), `document 1: metadata.name: Invalid value: "a/b"`},
		{"a namespace in capitals", strings.Replace(policyDoc, "namespace: shop", "namespace: Shop", 1), `metadata.namespace: Invalid value: "Shop"`},
		{"YAML that does not parse", "---\n" + policyDoc + "---\nkind: [\n", "document 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), []byte(tc.text), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
