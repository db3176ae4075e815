package policy

import "sort"

// Set is an immutable snapshot of the policies in force, indexed by
// namespace. A new Set replaces the old one whole when any policy changes,
// so a request is always checked against one consistent version.
type Set struct {
	byNamespace map[string][]*Policy
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
	return s
}

// Namespace returns the policies of one namespace, ordered by name.
func (s *Set) Namespace(ns string) []*Policy { return s.byNamespace[ns] }

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
