package crdschema

import (
	"context"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

func admit(t *testing.T, doc string) (map[string]any, error) {
	t.Helper()
	v, err := Shared()
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any // integers as int64, as Admit takes them
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	return obj, v.Admit(context.Background(), obj)
}

const policyHead = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api, namespace: shop}
`

func TestAdmitFillsInTheSchemaDefaults(t *testing.T) {
	obj, err := admit(t, policyHead+"spec:\n  limits: [{name: leak, leakyBucket: {capacity: 5, leakRate: 1}}]\n  lease: {units: 2}\n")
	if err != nil {
		t.Fatal(err)
	}
	spec := obj["spec"].(map[string]any)
	for field, want := range map[string]any{"onMissingKey": "Skip", "cost": int64(1), "mode": "Enforce", "failureMode": "Open"} {
		if spec[field] != want {
			t.Errorf("spec.%s = %#v, want %#v", field, spec[field], want)
		}
	}
	if _, ok := spec["key"]; ok {
		t.Error("spec.key has no schema default: it depends on the kind of policy")
	}
	leak := spec["limits"].([]any)[0].(map[string]any)["leakyBucket"].(map[string]any)
	if leak["leakInterval"] != "1s" || spec["lease"].(map[string]any)["ttl"] != "1s" {
		t.Errorf("leakInterval %v, lease %v: want 1s each", leak["leakInterval"], spec["lease"])
	}
}

func TestAdmitNamesEachFieldInTheAPIServersWords(t *testing.T) {
	_, err := admit(t, policyHead+"spec:\n  mode: Audit\n  limits: [{name: l, fixedWindow: {limit: 10, window: 1.5s}}]\n")
	for _, want := range []string{
		`spec.mode: Unsupported value: "Audit"`,
		// Not checked by the CEL rules after an enum error, as the API server does.
		"some validation rules were not checked",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	_, err = admit(t, policyHead+"spec:\n  limits: [{name: l, fixedWindow: {limit: 10, window: 1.5s}}]\n")
	if want := `spec.limits[0].fixedWindow.window: Invalid value: "1.5s": must be a duration such as 500ms`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestAdmitRefusesUnknownFieldsAsStrictValidationDoes(t *testing.T) {
	_, err := admit(t, "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: api, labelz: {}}\nspec:\n  limits: [{name: l, fixedWindow: {limit: 1, window: 1m, size: 2}}]\n")
	for _, want := range []string{`strict decoding error`, `unknown field "spec.limits[0].fixedWindow.size"`, `unknown field "metadata.labelz"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestAdmitOnlyTheAPIsKinds(t *testing.T) {
	_, err := admit(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	if err == nil || !strings.Contains(err.Error(), `kind: Unsupported value: "ConfigMap"`) {
		t.Errorf("err = %v", err)
	}
	_, err = admit(t, strings.Replace(policyHead, "v1alpha1", "v1", 1)+"spec: {}\n")
	if err == nil || !strings.Contains(err.Error(), "apiVersion: Invalid value") {
		t.Errorf("err = %v", err)
	}
}

// BenchmarkNew is what building the schema costs (once per process: Shared).
func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		if _, err := New(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmit is what checking one policy costs.
func BenchmarkAdmit(b *testing.B) {
	v, err := Shared()
	if err != nil {
		b.Fatal(err)
	}
	js, err := yaml.YAMLToJSON([]byte(policyHead + "spec:\n  limits: [{name: l, fixedWindow: {limit: 10, window: 1m}}]\n"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			b.Fatal(err)
		}
		if err := v.Admit(context.Background(), obj); err != nil {
			b.Fatal(err)
		}
	}
}
