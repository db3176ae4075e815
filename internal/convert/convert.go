// Package convert is `manager convert`: turning other rate limiters'
// configuration into RateLimitPolicy objects. Each format has a package
// below it (envoyratelimit, ingressnginx); this one holds what they share:
// the command, where a finding is, how much it matters, the order reports
// are given in, reading YAML inputs, policy names, and a policy written as
// YAML the way a person would write it.
package convert

// File is one input, by the name it was given ("-" for standard input).
type File struct {
	Name string
	Data []byte
}
