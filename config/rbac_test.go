package config

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
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
