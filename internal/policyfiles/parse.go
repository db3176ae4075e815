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
// schema as the API server would (internal/crdschema). A policy or
// RateLimitOverrides object the API server would refuse is a document with
// its errors, as `kubectl apply -f` refuses that object and creates the
// file's others: a policy does not apply (its last good version stays),
// RateLimitOverrides come back in refused. A field the API does not know,
// or a file that cannot be read as manifests, are an error for the file.
func parseFile(name string, b []byte) (docs []document, overrides []*ratelimitv1alpha1.RateLimitOverrides, refused []refusedOverrides, err error) {
	schema, err := crdschema.Shared()
	if err != nil {
		return nil, nil, nil, err
	}
	read, err := manifest.Read(context.Background(), b, schema.Admit)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, d := range read {
		if runtime.IsStrictDecodingError(d.Invalid) {
			// A field the API does not know: the file does not parse.
			return nil, nil, nil, fmt.Errorf("document %d: %w", d.Index, d.Invalid)
		}
		if d.Policy != nil {
			docs = append(docs, document{file: name, index: d.Index, spec: d.Policy, invalid: d.Invalid})
			continue
		}
		if d.Overrides.Namespace == "" {
			d.Overrides.Namespace = "default" // as kubectl does; a policy's is defaulted by its id
		}
		if d.Invalid != nil {
			refused = append(refused, refusedOverrides{index: d.Index, object: d.Overrides, err: d.Invalid})
			continue
		}
		overrides = append(overrides, d.Overrides)
	}
	return docs, overrides, refused, nil
}

// refusedOverrides is a RateLimitOverrides document the API server would
// refuse: its object's last good version, if any, stays in force.
type refusedOverrides struct {
	index  int
	object *ratelimitv1alpha1.RateLimitOverrides
	err    error
}

// keepLastGood adds to objects, for each refused document, the object of
// the same namespace and name among last (the file's RateLimitOverrides
// in force before), and returns the file's errors naming each refusal.
func keepLastGood(file string, objects []*ratelimitv1alpha1.RateLimitOverrides, refused []refusedOverrides, last []*ratelimitv1alpha1.RateLimitOverrides) ([]*ratelimitv1alpha1.RateLimitOverrides, []FileError) {
	var errs []FileError
	for _, r := range refused {
		kept := "it has no last good version"
		for _, o := range last {
			if o.Namespace == r.object.Namespace && o.Name == r.object.Name {
				objects = append(objects, o)
				kept = "its last good version stays"
				break
			}
		}
		errs = append(errs, FileError{File: file, Err: fmt.Errorf("document %d: RateLimitOverrides %s/%s not applied (%s): %w",
			r.index, r.object.Namespace, r.object.Name, kept, r.err)})
	}
	return objects, errs
}
