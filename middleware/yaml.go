package middleware

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// parsePolicyYAML reads the RateLimitPolicy documents of text.
func parsePolicyYAML(text, namespace string) ([]namedSpec, error) {
	var out []namedSpec
	rd := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for i := 1; ; i++ {
		raw, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		var fields map[string]any
		if err := yaml.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(fields) == 0 {
			continue // empty, or only comments
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		switch {
		case meta.Kind == "":
			return nil, fmt.Errorf("document %d: kind: required; want a RateLimitPolicy manifest (apiVersion, kind, metadata.name, spec)", i)
		case meta.Kind != "RateLimitPolicy":
			continue // like local mode: a file may hold other objects
		case meta.APIVersion != ratelimitv1alpha1.GroupVersion.String():
			return nil, fmt.Errorf("document %d: apiVersion %q: want %s", i, meta.APIVersion, ratelimitv1alpha1.GroupVersion)
		}
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := yaml.UnmarshalStrict(raw, &p); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("document %d: metadata.name: required", i)
		}
		if p.Namespace != "" && p.Namespace != namespace {
			return nil, fmt.Errorf("document %d (%s): metadata.namespace %q: the limiter's namespace is %q (WithNamespace)", i, p.Name, p.Namespace, namespace)
		}
		out = append(out, namedSpec{name: p.Name, spec: &p.Spec})
	}
	return out, nil
}
