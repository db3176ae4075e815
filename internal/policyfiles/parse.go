package policyfiles

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/crdschema"
	"github.com/sluice-dev/sluice/internal/manifest"
)

// parseFile reads the RateLimitPolicy and RateLimitOverrides documents of
// one file (internal/manifest), each checked and defaulted against the CRD
// schema as the API server would (internal/crdschema). A policy the API
// server would refuse is a document with its errors (it does not apply,
// and its last good version stays); a field the API does not know,
// RateLimitOverrides the API server would refuse, or a file that cannot be
// read as manifests, are an error for the file.
func parseFile(name string, b []byte) ([]document, []*ratelimitv1alpha1.RateLimitOverrides, error) {
	schema, err := crdschema.Shared()
	if err != nil {
		return nil, nil, err
	}
	read, err := manifest.Read(context.Background(), b, schema.Admit)
	if err != nil {
		return nil, nil, err
	}
	var docs []document
	var overrides []*ratelimitv1alpha1.RateLimitOverrides
	for _, d := range read {
		if runtime.IsStrictDecodingError(d.Invalid) {
			// A field the API does not know: the file does not parse.
			return nil, nil, fmt.Errorf("document %d: %w", d.Index, d.Invalid)
		}
		if d.Policy != nil {
			docs = append(docs, document{file: name, index: d.Index, spec: d.Policy, invalid: d.Invalid})
			continue
		}
		if d.Invalid != nil {
			return nil, nil, fmt.Errorf("document %d: %w", d.Index, d.Invalid)
		}
		if d.Overrides.Namespace == "" {
			d.Overrides.Namespace = "default" // as kubectl does; a policy's is defaulted by its id
		}
		overrides = append(overrides, d.Overrides)
	}
	return docs, overrides, nil
}
