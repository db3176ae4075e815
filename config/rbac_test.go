package config

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/admin"
)

// TestControllerRoleIsLeastPrivilege lists what the controller's
// ClusterRole allows and fails on anything beyond reading policies and
// RateLimitOverrides, writing their status, recording Events, holding its Lease and reading
// Gateways, HTTPRoutes and Namespaces (for targetRefs). A new
// permission must be added here on purpose, with a reason.
func TestControllerRoleIsLeastPrivilege(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{
		"ratelimit.sluice.dev/ratelimitpolicies:get,list,watch":           "read the policies",
		"ratelimit.sluice.dev/ratelimitpolicies/status:get,patch,update":  "write their status",
		"ratelimit.sluice.dev/ratelimitoverrides:get,list,watch":          "read the declared overrides",
		"ratelimit.sluice.dev/ratelimitoverrides/status:get,patch,update": "report which entries apply",
		"/events:create,patch":              "record Events (core API)",
		"events.k8s.io/events:create,patch": "record Events (events API)",
		"coordination.k8s.io/leases:create,delete,get,list,patch,update,watch": "hold the leader-election Lease",
		"gateway.networking.k8s.io/gateways:get,list,watch":                    "resolve targetRefs to Gateways (read only)",
		"gateway.networking.k8s.io/httproutes:get,list,watch":                  "resolve targetRefs to HTTPRoutes and their precedence (read only)",
		// Labels only: a listener's allowedRoutes.namespaces.selector
		// decides which namespaces' routes attach to it.
		"/namespaces:get,list,watch": "decide which namespaces' routes a listener accepts (read only)",
	}
	seen := map[string]bool{}
	for _, rule := range role.Rules {
		if len(rule.NonResourceURLs) > 0 || len(rule.ResourceNames) > 0 {
			t.Errorf("unexpected rule %+v", rule)
		}
		verbs := append([]string(nil), rule.Verbs...)
		sort.Strings(verbs)
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				grant := g + "/" + r + ":" + strings.Join(verbs, ",")
				if _, ok := allowed[grant]; !ok {
					t.Errorf("the controller's role grants %s, beyond what it needs", grant)
				}
				seen[grant] = true
			}
		}
	}
	for grant, why := range allowed {
		if !seen[grant] {
			t.Errorf("the controller's role lacks %s (needed to %s)", grant, why)
		}
	}
}

// TestControllerBindings lists every role bound to the controller's
// ServiceAccount. Beyond its own ClusterRole: the admin API's front
// authorizes each call with a SubjectAccessReview (system:auth-delegator)
// and trusts kube-apiserver's front-proxy certificate by the CA in the one
// ConfigMap the controller reads, kube-system/extension-apiserver-authentication
// (extension-apiserver-authentication-reader grants that name only). The
// check endpoint's ServiceAccount is bound to nothing.
func TestControllerBindings(t *testing.T) {
	want := map[string]string{
		"ClusterRole sluice-controller":                              "its own role (TestControllerRoleIsLeastPrivilege)",
		"ClusterRole system:auth-delegator":                          "authorize admin API calls with SubjectAccessReviews",
		"Role kube-system/extension-apiserver-authentication-reader": "read the front-proxy CA of kube-apiserver",
	}
	got := map[string]bool{}
	for _, u := range render(t, "rbac") {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		switch kindKey(u) {
		case "rbac.authorization.k8s.io/ClusterRoleBinding":
			b := typed[rbacv1.ClusterRoleBinding](t, u)
			subjects, ref = b.Subjects, b.RoleRef
		case "rbac.authorization.k8s.io/RoleBinding":
			b := typed[rbacv1.RoleBinding](t, u)
			subjects, ref = b.Subjects, b.RoleRef
			if ref.Kind == "Role" {
				ref.Name = b.Namespace + "/" + ref.Name
			}
		default:
			continue
		}
		for _, s := range subjects {
			switch {
			case s.Kind == "ServiceAccount" && s.Name == "sluice-check":
				t.Errorf("%s %s binds %s to the check endpoint, which needs no Kubernetes access", u.GetKind(), u.GetName(), ref.Name)
			case s.Kind == "ServiceAccount" && s.Name == "sluice-controller":
				grant := ref.Kind + " " + ref.Name
				if _, ok := want[grant]; !ok {
					t.Errorf("%s %s binds %s to the controller, beyond what it needs", u.GetKind(), u.GetName(), grant)
				}
				got[grant] = true
			}
		}
	}
	for grant, why := range want {
		if !got[grant] {
			t.Errorf("the controller is not bound to %s (needed to %s)", grant, why)
		}
	}
}

// TestAdminUserRoles proves the admin API's user roles equal to what the
// admin API's table of calls says they make (admin.Rules), in both groups
// a call is authorized in: admin.ratelimit.sluice.dev (kube-apiserver's
// check of the call's own resource and verb) and ratelimit.sluice.dev (the
// front's SubjectAccessReview). A viewer's role grants the reads and
// nothing else, so `kubectl auth can-i` says no to its reset. Both roles
// aggregate into Kubernetes' roles: view into view, edit and admin; edit
// into edit and admin. The chart ships this file (charts/sluice/files links
// to it), and config/default, the installer, holds config/rbac.
func TestAdminUserRoles(t *testing.T) {
	aggregateTo := map[admin.Role][]string{
		admin.RoleView: {"view", "edit", "admin"},
		admin.RoleEdit: {"edit", "admin"},
	}
	seen := 0
	for _, u := range render(t, "rbac") {
		name := admin.Role(u.GetName())
		to, ok := aggregateTo[name]
		if !ok || kindKey(u) != "rbac.authorization.k8s.io/ClusterRole" {
			continue
		}
		seen++
		role := typed[rbacv1.ClusterRole](t, u)
		for _, want := range to {
			if role.Labels["rbac.authorization.k8s.io/aggregate-to-"+want] != "true" {
				t.Errorf("%s does not aggregate into %s", role.Name, want)
			}
		}
		for label := range role.Labels {
			if to, ok := strings.CutPrefix(label, "rbac.authorization.k8s.io/aggregate-to-"); ok && !slices.Contains(aggregateTo[name], to) {
				t.Errorf("%s aggregates into %s too", role.Name, to)
			}
		}
		got, want := grants(t, role.Rules), grants(t, admin.Rules(name))
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("%s grants %s, which none of its calls needs", role.Name, g)
			}
		}
		for _, g := range want {
			if !slices.Contains(got, g) {
				t.Errorf("%s lacks %s, which one of its calls needs", role.Name, g)
			}
		}
	}
	if seen != len(admin.Roles) {
		t.Errorf("found %d of the admin API's user roles, want %d", seen, len(admin.Roles))
	}
}

// grants are rules one "group/resource:verb" each, sorted. A rule naming
// resources or URLs fails the test: the roles name none.
func grants(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+"/"+res+":"+v)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
