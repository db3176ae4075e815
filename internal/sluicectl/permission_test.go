package sluicectl

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/admin"
)

// TestPermissionsAreTheCallTable: what the plugin says a command needs (in
// its hints) is what the admin API's call table says, in both groups: the
// call's own resource and verb in admin.ratelimit.sluice.dev, which
// kube-apiserver authorizes, and the permission in ratelimit.sluice.dev,
// which Sluice's SubjectAccessReview checks. The role the hint names
// grants both.
func TestPermissionsAreTheCallTable(t *testing.T) {
	args := map[string][]string{
		"explain":         {"explain", "shop", "--url", "https://shop.example.com/"},
		"inspect":         {"inspect", "shop/p", "acme"},
		"reset":           {"reset", "shop/p", "acme"},
		"top":             {"top", "shop/p"},
		"bans":            {"bans", "shop/p"},
		"lift":            {"lift", "shop/p", "acme"},
		"override list":   {"override", "list", "shop/p"},
		"override delete": {"override", "delete", "shop/p", "acme"},
		"override set":    {"override", "set", "shop/p", "acme", "per-minute=5"},
	}
	for name := range commands {
		a, ok := args[name]
		if !ok {
			t.Errorf("command %q: no arguments in this test; add them", name)
			continue
		}
		c, _, err := parse(a)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := "/namespaces/" + c.namespace + "/" + c.sub
		if c.policy != "" {
			path = "/namespaces/" + c.namespace + "/ratelimitpolicies/" + url.PathEscape(c.policy) + "/" + c.sub
		}
		need, m := admin.Route(c.verb, path)
		if m != admin.MatchCall {
			t.Errorf("%s: %s %s is no call of the admin API (%v)", name, c.verb, path, m)
			continue
		}
		if need.Verb != c.need.verb || need.Subresource != c.need.subresource {
			t.Errorf("%s: the plugin says it needs %s on ratelimitpolicies/%s, the call table %s on ratelimitpolicies/%s",
				name, c.need.verb, c.need.subresource, need.Verb, need.Subresource)
		}
		role := admin.RoleEdit
		if strings.HasPrefix(roleFor(c.need), string(admin.RoleView)) {
			role = admin.RoleView
		}
		if !grants(role, admin.Group, c.ownResource(), c.ownVerb()) || !grants(role, "ratelimit.sluice.dev", "ratelimitpolicies/"+c.need.subresource, c.need.verb) {
			t.Errorf("%s: %s does not grant %s on %s and %s on ratelimitpolicies/%s", name, role, c.ownVerb(), c.ownResource(), c.need.verb, c.need.subresource)
		}
	}
}

func grants(role admin.Role, group, resource, verb string) bool {
	for _, r := range admin.Rules(role) {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}
