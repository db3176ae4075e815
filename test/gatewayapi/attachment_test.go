package gatewayapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// The scenarios below follow Gateway API's attachment rules: a route
// limited by a targeted policy is one its Gateway's listeners accept.
// Each policy has one global bucket of one request a minute, so once its
// route is attached every request after the first is denied, and a 200
// after that says the route is not (or no longer) attached.

// attachedTo is the Accepted condition of p's ancestor status for Gateway
// ns/name.
func attachedTo(p *ratelimitv1alpha1.RateLimitPolicy, ns, name string) *metav1.Condition {
	for _, a := range p.Status.Ancestors {
		if string(a.AncestorRef.Name) == name && a.AncestorRef.Namespace != nil && string(*a.AncestorRef.Namespace) == ns &&
			a.AncestorRef.Kind != nil && *a.AncestorRef.Kind == "Gateway" {
			return apimeta.FindStatusCondition(a.Conditions, string(gatewayv1.PolicyConditionAccepted))
		}
	}
	return nil
}

// waitAncestor waits until p's ancestor status for Gateway ns/name has
// Accepted with status and a message containing each of words.
func (c *cluster) waitAncestor(t *testing.T, policy, ns, name string, status metav1.ConditionStatus, words ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("ancestor %s/%s Accepted=%s %q", ns, name, status, words), func() (bool, string) {
		p := c.policy(t, policy)
		cond := attachedTo(p, ns, name)
		if cond == nil || cond.Status != status || cond.ObservedGeneration != p.Generation {
			return false, fmt.Sprintf("%+v", p.Status.Ancestors)
		}
		for _, w := range words {
			if !strings.Contains(cond.Message, w) {
				return false, cond.Message
			}
		}
		return true, ""
	})
}

// limited waits until host's requests are denied (the route attached).
func (c *cluster) limited(t *testing.T, what, host string) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		got := c.statuses(t, 2, "GET", host, "/x")
		return got[1] == http.StatusTooManyRequests, fmt.Sprint(got)
	})
}

// unlimited waits until host's requests are allowed again (the route
// detached, with its bucket spent).
func (c *cluster) unlimited(t *testing.T, what, host string) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		got := c.statuses(t, 3, "GET", host, "/x")
		return got[2] == http.StatusOK, fmt.Sprint(got)
	})
}

// allowed asserts that host's requests are not limited now.
func (c *cluster) allowed(t *testing.T, what, host string) {
	t.Helper()
	if got := c.statuses(t, 3, "GET", host, "/x"); got[1] != http.StatusOK || got[2] != http.StatusOK {
		t.Fatalf("%s: %v, want 200s", what, got)
	}
}

func (c *cluster) labelNamespace(t *testing.T, labels map[string]string) {
	t.Helper()
	var ns corev1.Namespace
	if err := c.client.Get(context.Background(), types.NamespacedName{Name: c.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = labels
	if err := c.client.Update(context.Background(), &ns); err != nil {
		t.Fatal(err)
	}
}

func globalPolicy(name, route string) string {
	return fmt.Sprintf(`
metadata: {name: %s}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: %s}]
  key: global
  limits: [{name: minute, fixedWindow: {limit: 1, window: 1m}}]
`, name, route)
}

// A route in another namespace than its Gateway attaches only where the
// listener's allowedRoutes.namespaces admit it: not with the default
// (Same), with a Selector that selects its namespace (following the
// namespace's labels), and with All.
func routeFromAnotherNamespace(t *testing.T, gwc, c *cluster) {
	shared := func(allowed string) string {
		return `
metadata: {name: shared}
spec:
  gatewayClassName: any
  listeners:
  - {name: web, protocol: HTTP, port: 80` + allowed + `}
`
	}
	gwc.apply(t, &gatewayv1.Gateway{}, shared(""))
	c.apply(t, &gatewayv1.HTTPRoute{}, `
metadata: {name: app}
spec:
  parentRefs: [{name: shared, namespace: `+gwc.ns+`}]
  hostnames: [app.example]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
`)
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, globalPolicy("app", "app"))

	c.waitAncestor(t, "app", gwc.ns, "shared", metav1.ConditionFalse, "listener web", "Same")
	eventually(t, "the policy is Ready", func() (bool, string) { return ready(c.policy(t, "app")) })
	c.allowed(t, "from: Same (the default), another namespace's route", "app.example")

	gwc.apply(t, &gatewayv1.Gateway{}, shared(`, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {gateway-access: shared}}}}`))
	c.waitAncestor(t, "app", gwc.ns, "shared", metav1.ConditionFalse, "does not select namespace "+c.ns)
	c.allowed(t, "from: Selector, the route's namespace unlabelled", "app.example")

	c.labelNamespace(t, map[string]string{"gateway-access": "shared"})
	c.limited(t, "from: Selector, the route's namespace labeled", "app.example")
	c.waitAncestor(t, "app", gwc.ns, "shared", metav1.ConditionTrue)

	c.labelNamespace(t, map[string]string{"gateway-access": "none"})
	c.unlimited(t, "from: Selector, the label changed", "app.example")

	gwc.apply(t, &gatewayv1.Gateway{}, shared(`, allowedRoutes: {namespaces: {from: All}}`))
	c.limited(t, "from: All", "app.example")
}

// A parentRef's sectionName and port select the listeners the route
// attaches to, and the listeners' hostnames then decide its hosts.
func sectionNameAndPort(t *testing.T, c *cluster) {
	c.apply(t, &gatewayv1.Gateway{}, `
metadata: {name: ports}
spec:
  gatewayClassName: any
  listeners:
  - {name: a, protocol: HTTP, port: 80, hostname: a.example}
  - {name: b, protocol: HTTP, port: 8080, hostname: b.example}
`)
	route := func(parentRef string) string {
		return `
metadata: {name: one}
spec:
  parentRefs: [` + parentRef + `]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
`
	}
	c.apply(t, &gatewayv1.HTTPRoute{}, route(`{name: ports, port: 8080}`))
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, globalPolicy("one", "one"))
	eventually(t, "the policy is Ready", func() (bool, string) { return ready(c.policy(t, "one")) })
	c.limited(t, "port 8080: listener b's host", "b.example")
	c.allowed(t, "port 8080: listener a's host", "a.example")

	c.apply(t, &gatewayv1.HTTPRoute{}, route(`{name: ports, sectionName: a}`))
	c.limited(t, "sectionName a: listener a's host", "a.example")
	c.unlimited(t, "sectionName a: listener b's host", "b.example")

	// Both must agree: listener a is not on port 8080.
	c.apply(t, &gatewayv1.HTTPRoute{}, route(`{name: ports, sectionName: a, port: 8080}`))
	c.waitAncestor(t, "one", c.ns, "ports", metav1.ConditionFalse, "sectionName a, port 8080", "selects no listener")
	c.unlimited(t, "sectionName a and port 8080", "a.example")
	c.allowed(t, "sectionName a and port 8080", "b.example")
}

// A listener whose hostname the route's hostnames do not intersect, or
// whose allowedRoutes.kinds leave HTTPRoute out, does not take the route;
// the policy says which listener refused it and why.
func listenerRefusals(t *testing.T, c *cluster) {
	gateway := func(kinds string) string {
		return `
metadata: {name: named}
spec:
  gatewayClassName: any
  listeners:
  - {name: shop, protocol: HTTP, port: 80, hostname: "*.shop.example"` + kinds + `}
`
	}
	c.apply(t, &gatewayv1.Gateway{}, gateway(""))
	route := func(host string) string {
		return `
metadata: {name: blog}
spec:
  parentRefs: [{name: named}]
  hostnames: [` + host + `]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
`
	}
	c.apply(t, &gatewayv1.HTTPRoute{}, route("blog.example"))
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, globalPolicy("blog", "blog"))
	c.waitAncestor(t, "blog", c.ns, "named", metav1.ConditionFalse, "HTTPRoute "+c.ns+"/blog", "listener shop", "hostname *.shop.example does not intersect")
	c.allowed(t, "a hostname outside the listener's", "blog.example")

	c.apply(t, &gatewayv1.HTTPRoute{}, route("blog.shop.example"))
	c.limited(t, "a hostname inside the listener's", "blog.shop.example")

	c.apply(t, &gatewayv1.Gateway{}, gateway(`, allowedRoutes: {kinds: [{kind: GRPCRoute}]}`))
	c.waitAncestor(t, "blog", c.ns, "named", metav1.ConditionFalse, "listener shop", "allowedRoutes.kinds")
	c.unlimited(t, "a listener for GRPCRoutes only", "blog.shop.example")
}

// A route its Gateway's implementation refused (status.parents:
// Accepted=False for that parent) is not attached there, whatever the
// spec says; once the route is edited, that answer is about an older
// generation, and the spec decides until the implementation answers again.
func refusedByTheImplementation(t *testing.T, c *cluster) {
	c.apply(t, &gatewayv1.Gateway{}, `
metadata: {name: impl}
spec:
  gatewayClassName: any
  listeners: [{name: web, protocol: HTTP, port: 80}]
`)
	routeDoc := func(path string) string {
		return `
metadata: {name: refused}
spec:
  parentRefs: [{name: impl}]
  hostnames: [refused.example]
  rules: [{matches: [{path: {type: PathPrefix, value: ` + path + `}}]}]
`
	}
	c.apply(t, &gatewayv1.HTTPRoute{}, routeDoc("/"))
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, globalPolicy("refused", "refused"))
	c.limited(t, "no status.parents: attached by the spec", "refused.example")

	setAccepted := func(status metav1.ConditionStatus, reason string) {
		t.Helper()
		var route gatewayv1.HTTPRoute
		if err := c.client.Get(context.Background(), types.NamespacedName{Namespace: c.ns, Name: "refused"}, &route); err != nil {
			t.Fatal(err)
		}
		route.Status.Parents = []gatewayv1.RouteParentStatus{{
			ParentRef:      gatewayv1.ParentReference{Name: "impl"},
			ControllerName: "gateway.example.net/controller",
			Conditions: []metav1.Condition{{Type: "Accepted", Status: status, Reason: reason, Message: "as the implementation decided",
				ObservedGeneration: route.Generation, LastTransitionTime: metav1.NewTime(time.Now())}},
		}}
		if err := c.client.Status().Update(context.Background(), &route); err != nil {
			t.Fatal(err)
		}
	}
	setAccepted(metav1.ConditionFalse, "NotAllowedByListeners")
	c.waitAncestor(t, "refused", c.ns, "impl", metav1.ConditionFalse, "gateway.example.net/controller did not accept", "NotAllowedByListeners")
	c.unlimited(t, "status.parents: Accepted=False", "refused.example")

	setAccepted(metav1.ConditionTrue, "Accepted")
	c.limited(t, "status.parents: Accepted=True", "refused.example")

	setAccepted(metav1.ConditionFalse, "NotAllowedByListeners")
	c.unlimited(t, "status.parents: Accepted=False again", "refused.example")
	c.apply(t, &gatewayv1.HTTPRoute{}, routeDoc("/x"))
	c.limited(t, "the route edited since the refusal", "refused.example")
}
