package policy

import "sort"

// Set is an immutable snapshot of the policies in force, indexed by
// namespace. A new Set replaces the old one whole when any policy changes,
// so a request is always checked against one consistent version.
type Set struct {
	byNamespace map[string][]*Policy
	indexes     map[string]*namespaceIndex
	all         []*Policy
	// Revision identifies the snapshot: the policy-table revision in
	// Redis, or a counter in local mode. It changes with every new Set.
	Revision int64
}

// NewSet indexes policies. Within a namespace they are ordered by name, so
// evaluation order (and which denial is reported) is stable.
func NewSet(revision int64, policies []*Policy) *Set {
	s := &Set{byNamespace: map[string][]*Policy{}, Revision: revision}
	s.all = append(s.all, policies...)
	sort.Slice(s.all, func(i, j int) bool {
		if s.all[i].Namespace != s.all[j].Namespace {
			return s.all[i].Namespace < s.all[j].Namespace
		}
		return s.all[i].Name < s.all[j].Name
	})
	for _, p := range s.all {
		s.byNamespace[p.Namespace] = append(s.byNamespace[p.Namespace], p)
	}
	s.indexes = make(map[string]*namespaceIndex, len(s.byNamespace))
	for ns, policies := range s.byNamespace {
		s.indexes[ns] = newNamespaceIndex(policies)
	}
	return s
}

// Namespace returns the policies of one namespace, ordered by name.
func (s *Set) Namespace(ns string) []*Policy { return s.byNamespace[ns] }

// AppendCandidates appends to dst the policies of namespace ns that r can
// match, ordered by name: every policy that matches r is among them, so a
// caller evaluating them finds what evaluating Namespace(ns) would, with
// fewer policies to evaluate.
func (s *Set) AppendCandidates(dst []*Policy, ns string, r *Request) []*Policy {
	x := s.indexes[ns]
	if x == nil {
		return dst
	}
	return x.appendCandidates(dst, r)
}

// Get returns one policy, or nil.
func (s *Set) Get(ns, name string) *Policy {
	for _, p := range s.byNamespace[ns] {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// All returns every policy, ordered by namespace and name.
func (s *Set) All() []*Policy { return s.all }
