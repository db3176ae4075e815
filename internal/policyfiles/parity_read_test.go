package policyfiles

import (
	"errors"

	"github.com/sluice-dev/sluice/internal/policy"
)

// readAsLocalMode reads text as local mode reads a policy file.
func readAsLocalMode(text string) error {
	docs, _, err := parseFile("parity.yaml", []byte(text))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range docs {
		if _, err := policy.Compile(d.id().namespace, d.id().name, &d.spec.Spec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
