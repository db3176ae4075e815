package policyfiles

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

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
