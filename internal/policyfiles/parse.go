package policyfiles

import (
	"bytes"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// parseFile reads the RateLimitPolicy and RateLimitOverrides documents of
// one file; documents of other kinds (a kustomization.yaml) are skipped.
// Fields are decoded strictly, so a misspelled field is an error rather
// than silently ignored.
func parseFile(name string, b []byte) ([]document, []*ratelimitv1alpha1.RateLimitOverrides, error) {
	var docs []document
	var overrides []*ratelimitv1alpha1.RateLimitOverrides
	for i, raw := range splitDocuments(b) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		var obj metav1.Object
		switch meta.Kind {
		case "RateLimitPolicy":
			p := &ratelimitv1alpha1.RateLimitPolicy{}
			docs = append(docs, document{file: name, index: i + 1, spec: p})
			obj = p
		case "RateLimitOverrides":
			o := &ratelimitv1alpha1.RateLimitOverrides{}
			overrides = append(overrides, o)
			obj = o
		default:
			continue
		}
		if meta.APIVersion != ratelimitv1alpha1.GroupVersion.String() {
			return nil, nil, fmt.Errorf("document %d: apiVersion %q: want %s", i+1, meta.APIVersion, ratelimitv1alpha1.GroupVersion)
		}
		if err := yaml.UnmarshalStrict(raw, obj); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if obj.GetName() == "" {
			return nil, nil, fmt.Errorf("document %d: metadata.name: required", i+1)
		}
		if err := validateNames(obj); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if obj.GetNamespace() == "" {
			if _, ok := obj.(*ratelimitv1alpha1.RateLimitOverrides); ok {
				obj.SetNamespace("default") // as kubectl does; a policy's is defaulted by its id
			}
		}
	}
	return docs, overrides, nil
}

// validateNames checks metadata.name and metadata.namespace as the API
// server does for a namespaced custom resource: the name a DNS subdomain,
// the namespace a DNS label. A file must not hold an object the cluster
// would refuse (nor one whose name, holding a "/", reads as another's).
func validateNames(o metav1.Object) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1123Subdomain(o.GetName()) {
		errs = append(errs, field.Invalid(meta.Child("name"), o.GetName(), msg))
	}
	if ns := o.GetNamespace(); ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), ns, msg))
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
