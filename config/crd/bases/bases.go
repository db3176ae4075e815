// Package bases embeds the CRDs `make manifests` generates in this folder,
// so what validates objects outside the API server (internal/crdschema)
// applies the very schema a cluster applies. Only this file is written by
// hand; the YAML files are generated.
package bases

import _ "embed"

// RateLimitPolicies is the RateLimitPolicy CRD.
//
//go:embed ratelimit.sluice.dev_ratelimitpolicies.yaml
var RateLimitPolicies []byte

// RateLimitOverrides is the RateLimitOverrides CRD.
//
//go:embed ratelimit.sluice.dev_ratelimitoverrides.yaml
var RateLimitOverrides []byte
