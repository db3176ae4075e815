package admin

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Role is one of the admin API's user roles, the ClusterRoles of
// config/rbac/admin_user_roles.yaml (which a test proves equal to Rules).
type Role string

const (
	// RoleView makes the calls that read: explain, inspect, top, bans and
	// the overrides' list.
	RoleView Role = "sluice-admin-view"
	// RoleEdit makes every call: those that read, and reset, lift and
	// setting and deleting overrides.
	RoleEdit Role = "sluice-admin-edit"
)

// Roles are the admin API's user roles.
var Roles = []Role{RoleView, RoleEdit}

// reads reports whether the call only reads: it needs a get.
func (c *call) reads() bool { return c.need.Verb == "get" }

// Rules are what role grants, derived from the calls it makes, in the two
// groups a call is authorized in: Group, where kube-apiserver checks the
// call's own resource and verb (as discovery lists them) before it proxies
// the call, and ratelimit.sluice.dev, where the front's SubjectAccessReview
// checks what the call needs. Nothing else: `kubectl auth can-i` and RBAC
// audits answer as the calls do. One rule per resource, verbs sorted.
func Rules(role Role) []rbacv1.PolicyRule {
	var needs, own rules
	for i := range calls {
		c := &calls[i]
		if role == RoleView && !c.reads() {
			continue
		}
		needs.grant(ratelimitv1alpha1.GroupVersion.Group, "ratelimitpolicies/"+c.need.Subresource, c.need.Verb)
		own.grant(Group, c.resource, c.verb)
	}
	return append(needs, own...)
}

// rules are PolicyRules, one per group and resource.
type rules []rbacv1.PolicyRule

// grant adds verb on resource of group.
func (rs *rules) grant(group, resource, verb string) {
	for i := range *rs {
		r := &(*rs)[i]
		if r.APIGroups[0] == group && r.Resources[0] == resource {
			if !slices.Contains(r.Verbs, verb) {
				r.Verbs = append(r.Verbs, verb)
				slices.Sort(r.Verbs)
			}
			return
		}
	}
	*rs = append(*rs, rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{verb}})
}
