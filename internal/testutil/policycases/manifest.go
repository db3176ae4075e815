package policycases

import (
	"fmt"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Kinds of the API's objects, as a manifest names them.
const (
	KindPolicy    = "RateLimitPolicy"
	KindOverrides = "RateLimitOverrides"
)

// Object is c's spec as an object of kind named name in namespace, ready
// for an unstructured client or a manifest.
func (c Case) Object(kind, namespace, name string) (map[string]any, error) {
	var spec map[string]any
	if err := yaml.Unmarshal([]byte(c.Spec), &spec); err != nil {
		return nil, fmt.Errorf("case %q: spec: %w", c.Name, err)
	}
	return map[string]any{
		"apiVersion": ratelimitv1alpha1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       spec,
	}, nil
}

// Manifest is c as a YAML document of kind, as a file holds it.
func (c Case) Manifest(kind, namespace, name string) (string, error) {
	obj, err := c.Object(kind, namespace, name)
	if err != nil {
		return "", err
	}
	b, err := yaml.Marshal(obj)
	return string(b), err
}
