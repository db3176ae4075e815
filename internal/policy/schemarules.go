package policy

import "regexp"

// The CRD schema's patterns (the markers of api/v1alpha1's shared types),
// for specs that reach Compile with no API server or schema validator in
// front: the middleware's. The parity test of internal/policyfiles holds
// these checks equal to the schema's, case by case.
var (
	durationPattern = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)
	hostPattern     = regexp.MustCompile(`^([*][.])?[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)
)
