package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/internal/manifest"
	"github.com/sluice-dev/sluice/internal/policy"
)

// compilePolicies compiles the policies of WithPolicy and WithPolicyYAML.
// Without an API server in front, each spec is checked against the CRD
// schema's rules as Go repeats them (policy.ValidateSpec; the CRD's own
// validator would pull the apiextensions server libraries into every
// service that imports this package).
func compilePolicies(c *config) ([]*policy.Policy, error) {
	specs := append([]namedSpec(nil), c.specs...)
	for _, text := range c.yamlTexts {
		docs, err := readPolicyYAML(text, c.namespace)
		if err != nil {
			return nil, fmt.Errorf("middleware: WithPolicyYAML: %w", err)
		}
		specs = append(specs, docs...)
	}
	if len(specs) == 0 {
		return nil, errors.New("middleware: no policies: add WithPolicy or WithPolicyYAML, or use WithRemote")
	}
	seen := map[string]bool{}
	var policies []*policy.Policy
	var errs []error
	for _, s := range specs {
		if msgs := validation.IsDNS1123Subdomain(s.name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("policy %q: name: %s", s.name, strings.Join(msgs, "; ")))
			continue
		}
		if seen[s.name] {
			errs = append(errs, fmt.Errorf("policy %q: defined twice", s.name))
			continue
		}
		seen[s.name] = true
		p, err := policy.ValidateAndCompile(c.namespace, s.name, s.spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", s.name, err))
			continue
		}
		policies = append(policies, p)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("middleware: %w", errors.Join(errs...))
	}
	return policies, nil
}

// readPolicyYAML reads the RateLimitPolicy documents of text, as local
// mode reads a file (internal/manifest); RateLimitOverrides documents are
// local mode's and the controller's, and skipped here.
func readPolicyYAML(text, namespace string) ([]namedSpec, error) {
	docs, err := manifest.Read(context.Background(), []byte(text), nil)
	if err != nil {
		return nil, err
	}
	var out []namedSpec
	for _, d := range docs {
		switch {
		case d.Policy == nil:
			continue
		case d.Invalid != nil:
			return nil, fmt.Errorf("document %d (%s): %w", d.Index, d.Name(), d.Invalid)
		case d.Namespace() != "" && d.Namespace() != namespace:
			return nil, fmt.Errorf("document %d (%s): metadata.namespace %q: the limiter's namespace is %q (WithNamespace)", d.Index, d.Name(), d.Namespace(), namespace)
		}
		out = append(out, namedSpec{name: d.Name(), spec: &d.Policy.Spec})
	}
	return out, nil
}
