package policyfiles

import "errors"

// readAsLocalMode reads text as local mode reads a policy file: parsed,
// checked against the schema, each policy compiled; RateLimitOverrides the
// schema refuses are errors too.
func readAsLocalMode(text string) error {
	docs, _, refused, err := parseFile("parity.yaml", []byte(text))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range docs {
		if _, err := d.compile(d.id(), &d.spec.Spec); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range refused {
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}
