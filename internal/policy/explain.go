package policy

import (
	"fmt"
	"strings"
)

// Explain is Match for a person: whether p applies to the request and,
// when it does not, why, naming the field of spec.match (or targetRefs)
// the request failed. It decides by the same tests as Match. An error of
// the `when` expression matches, as in Match, with the error returned.
func (e *Eval) Explain(p *Policy) (matched bool, reason string, err error) {
	m := &p.match
	if mm := m.mismatch(e.r); mm.part != failedNone {
		return false, m.explain(mm, e.r), nil
	}
	if m.when == nil {
		return true, "", nil
	}
	ok, err := m.when.eval(&e.vars)
	if err != nil {
		return true, "", err
	}
	if !ok {
		return false, "spec.match.when is false for this request", nil
	}
	return true, "", nil
}

// explain says why r failed the part of m that mm names.
func (m *matcher) explain(mm mismatchOf, r *Request) string {
	switch mm.part {
	case failedKind:
		if m.forDescriptors {
			return "the policy matches rate limit service descriptors (spec.match.domain, spec.match.descriptor), not HTTP requests"
		}
		return "the policy matches HTTP requests, not rate limit service descriptors"
	case failedDomain:
		return fmt.Sprintf("domain %q is not spec.match.domain %q", r.Domain, m.domain)
	case failedDescriptor:
		return "the descriptor matches none of spec.match.descriptor's entries"
	case failedHost:
		return fmt.Sprintf("host %s matches none of spec.match.hosts", orNone(r.Host))
	case failedPath:
		return fmt.Sprintf("path %s matches none of spec.match.paths", r.Path)
	case failedMethod:
		return fmt.Sprintf("method %s matches none of spec.match.methods", r.Method)
	case failedHeader:
		want := m.headers[mm.header]
		if want.anyValue {
			return fmt.Sprintf("header %s is absent (spec.match.headers[%d])", want.name, mm.header)
		}
		return fmt.Sprintf("header %s is not %q (spec.match.headers[%d])", want.name, want.value, mm.header)
	case failedExempt:
		return fmt.Sprintf("client %s is in spec.match.exemptClients", r.ClientIP)
	case failedRoutes:
		return "the request is routed by none of spec.targetRefs"
	}
	return ""
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
