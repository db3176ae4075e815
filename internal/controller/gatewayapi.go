package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes;gateways,verbs=get;list;watch

// ControllerName is the controllerName of the policies' ancestor statuses.
const ControllerName gatewayv1.GatewayController = "ratelimit.sluice.dev/controller"

// Reasons of the Accepted condition of an ancestor status (GEP-713).
const (
	ReasonTargetAccepted = string(gatewayv1.PolicyReasonAccepted)
	ReasonTargetNotFound = string(gatewayv1.PolicyReasonTargetNotFound)
	ReasonTargetInvalid  = string(gatewayv1.PolicyReasonInvalid)
)

const gatewayGroup = gatewayv1.GroupName

// watchGatewayAPI adds the watches of targeted policies to b: a change to
// any Gateway or HTTPRoute (its status.parents included) reconciles every
// policy with targetRefs, so a route's edit reaches enforcement as a
// policy's does (other routes' edits can change which requests a targeted
// route receives); so does a change to a Namespace's labels, which
// listeners' allowedRoutes.namespaces.selector read.
func (r *Reconciler) watchGatewayAPI(mgr ctrl.Manager, b *builder.Builder) *builder.Builder {
	if r.Targets == nil {
		r.Targets = &TargetResolver{Client: mgr.GetClient()}
	}
	return b.Watches(&gatewayv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.targetingPolicies)).
		Watches(&gatewayv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(r.targetingPolicies)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.targetingPolicies), builder.WithPredicates(predicate.LabelChangedPredicate{}))
}

// targetingPolicies are the policies with targetRefs, for a Gateway or
// HTTPRoute event.
func (r *Reconciler) targetingPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list ratelimitv1alpha1.RateLimitPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "list policies for a Gateway API change")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if p := &list.Items[i]; len(p.Spec.TargetRefs) > 0 {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out
}

// Resolution is what a policy's targetRefs resolve to: the routing its
// matcher compiles, the ancestor statuses, and the targets not found.
type Resolution struct {
	Routes    *policy.Routes
	Ancestors []gatewayv1.PolicyAncestorStatus
	// Missing describes each target that was not found or names a section
	// its object lacks, for the Ready condition's message.
	Missing []string
}

// TargetResolver reads Gateways and HTTPRoutes (read-only) to resolve
// targetRefs.
type TargetResolver struct {
	Client client.Reader
}

// Resolve resolves p's targetRefs; a policy without them resolves to nil
// routes. An error is the API server's (not a missing target).
func (r *TargetResolver) Resolve(ctx context.Context, p *ratelimitv1alpha1.RateLimitPolicy) (*Resolution, error) {
	res := &Resolution{}
	if len(p.Spec.TargetRefs) == 0 {
		return res, nil
	}
	res.Routes = &policy.Routes{}
	t, err := r.findTargets(ctx, p, res)
	if err != nil {
		return nil, err
	}
	if len(t.routes) > 0 {
		if err := r.addRouteTables(ctx, t, res); err != nil {
			return nil, err
		}
	}
	if err := r.addListenerTables(ctx, t, res); err != nil {
		return nil, err
	}
	slices.SortFunc(res.Routes.Tables, func(a, b policy.RouteTable) int { return strings.Compare(a.Gateway, b.Gateway) })
	return res, nil
}

// targets are the objects a policy's targetRefs found, each with the
// sections named (rule or listener names; "" for the whole object).
type targets struct {
	routes   map[types.NamespacedName][]string
	gateways map[types.NamespacedName][]string
	// routing are the Gateways whose routing decides which requests the
	// targeted routes get: their parents and the targeted Gateways, in
	// the order found.
	routing []types.NamespacedName
}

func (t *targets) addRouting(g types.NamespacedName) {
	if !slices.Contains(t.routing, g) {
		t.routing = append(t.routing, g)
	}
}

// findTargets reads the HTTPRoutes and Gateways p's targetRefs name. A
// target that is not found, or lacks the section named, is reported in
// res and left out.
func (r *TargetResolver) findTargets(ctx context.Context, p *ratelimitv1alpha1.RateLimitPolicy, res *Resolution) (*targets, error) {
	t := &targets{routes: map[types.NamespacedName][]string{}, gateways: map[types.NamespacedName][]string{}}
	for i, ref := range p.Spec.TargetRefs {
		key := types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)}
		section := ""
		if ref.SectionName != nil {
			section = string(*ref.SectionName)
		}
		var problem, reason string
		var err error
		switch ref.Kind {
		case "HTTPRoute":
			problem, reason, err = r.findRoute(ctx, key, section, t, res)
		case "Gateway":
			problem, reason, err = r.findGateway(ctx, key, section, t)
		}
		if err != nil {
			return nil, err
		}
		if problem != "" {
			res.missing(p, i, problem, reason)
		}
	}
	return t, nil
}

// findRoute adds the HTTPRoute key to t, or says why it is not a target
// (problem, with its reason).
func (r *TargetResolver) findRoute(ctx context.Context, key types.NamespacedName, section string, t *targets, res *Resolution) (problem, reason string, err error) {
	var route gatewayv1.HTTPRoute
	if err := r.Client.Get(ctx, key, &route); err != nil {
		if !notFound(err) {
			return "", "", err
		}
		return "HTTPRoute " + key.String() + " not found", ReasonTargetNotFound, nil
	}
	if section != "" && !hasRule(&route, section) {
		return fmt.Sprintf("HTTPRoute %s has no rule named %q", key, section), ReasonTargetInvalid, nil
	}
	t.routes[key] = append(t.routes[key], section)
	parents := parentGateways(&route)
	if len(parents) == 0 {
		res.unattached(key, "HTTPRoute "+key.String()+" names no Gateway in its parentRefs: it receives no requests")
	}
	for _, g := range parents {
		t.addRouting(g)
	}
	return "", "", nil
}

// findGateway adds the Gateway key to t, or says why it is not a target
// (problem, with its reason).
func (r *TargetResolver) findGateway(ctx context.Context, key types.NamespacedName, section string, t *targets) (problem, reason string, err error) {
	var gw gatewayv1.Gateway
	if err := r.Client.Get(ctx, key, &gw); err != nil {
		if !notFound(err) {
			return "", "", err
		}
		return "Gateway " + key.String() + " not found", ReasonTargetNotFound, nil
	}
	if section != "" && !slices.ContainsFunc(gw.Spec.Listeners, func(l gatewayv1.Listener) bool { return string(l.Name) == section }) {
		return fmt.Sprintf("Gateway %s has no listener named %q", key, section), ReasonTargetInvalid, nil
	}
	t.gateways[key] = append(t.gateways[key], section)
	t.addRouting(key)
	return "", "", nil
}

// addRouteTables adds the route table of each Gateway in t.routing to
// which a targeted route attaches, with its ancestor status.
func (r *TargetResolver) addRouteTables(ctx context.Context, t *targets, res *Resolution) error {
	routes, err := r.routesByGateway(ctx)
	if err != nil {
		return err
	}
	att := newAttacher(r.Client)
	for _, g := range t.routing {
		var gw gatewayv1.Gateway
		if err := r.Client.Get(ctx, g, &gw); err != nil {
			if !notFound(err) {
				return err
			}
			res.ancestor(g, metav1.ConditionFalse, ReasonTargetNotFound, "Gateway "+g.String()+", a parent of the targeted route, not found")
			continue
		}
		table, unattached, err := routeTable(ctx, att, &gw, routes[g], t.routes)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(table.Entries, func(e policy.RouteEntry) bool { return e.Targeted }) {
			res.ancestor(g, metav1.ConditionFalse, ReasonTargetInvalid,
				truncate("no targeted route is attached to this Gateway, so the policy applies to none of its requests: "+strings.Join(unattached, "; "), 32768))
			continue
		}
		res.Routes.Tables = append(res.Routes.Tables, table)
		res.ancestor(g, metav1.ConditionTrue, ReasonTargetAccepted, "the policy applies to the targeted routes' requests on this Gateway")
	}
	return nil
}

// addListenerTables adds the table of each targeted Gateway's listeners,
// and its ancestor status unless its route table gave it one.
func (r *TargetResolver) addListenerTables(ctx context.Context, t *targets, res *Resolution) error {
	for g, sections := range t.gateways {
		var gw gatewayv1.Gateway
		if err := r.Client.Get(ctx, g, &gw); err != nil {
			return err
		}
		res.Routes.Tables = append(res.Routes.Tables, listenerTable(&gw, sections))
		if !slices.ContainsFunc(res.Ancestors, func(a gatewayv1.PolicyAncestorStatus) bool { return isGateway(a.AncestorRef, g) }) {
			res.ancestor(g, metav1.ConditionTrue, ReasonTargetAccepted, "the policy applies to this Gateway's requests")
		}
	}
	return nil
}

func notFound(err error) bool {
	return apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err)
}

func (res *Resolution) missing(p *ratelimitv1alpha1.RateLimitPolicy, i int, msg, reason string) {
	res.Missing = append(res.Missing, fmt.Sprintf("spec.targetRefs[%d]: %s", i, msg))
	t := p.Spec.TargetRefs[i]
	group, kind, ns := gatewayv1.Group(gatewayGroup), t.Kind, gatewayv1.Namespace(p.Namespace)
	res.Ancestors = append(res.Ancestors, gatewayv1.PolicyAncestorStatus{
		AncestorRef:    gatewayv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: t.Name, SectionName: t.SectionName},
		ControllerName: ControllerName,
		Conditions:     []metav1.Condition{acceptedCondition(p.Generation, metav1.ConditionFalse, reason, msg)},
	})
}

func (res *Resolution) ancestor(g types.NamespacedName, status metav1.ConditionStatus, reason, msg string) {
	group, kind, ns := gatewayv1.Group(gatewayGroup), gatewayv1.Kind("Gateway"), gatewayv1.Namespace(g.Namespace)
	res.Ancestors = append(res.Ancestors, gatewayv1.PolicyAncestorStatus{
		AncestorRef:    gatewayv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gatewayv1.ObjectName(g.Name)},
		ControllerName: ControllerName,
		Conditions:     []metav1.Condition{acceptedCondition(0, status, reason, msg)},
	})
}

// unattached reports a targeted route that attaches to no Gateway, with
// the route as the ancestor: there is no Gateway to name.
func (res *Resolution) unattached(route types.NamespacedName, msg string) {
	group, kind, ns := gatewayv1.Group(gatewayGroup), gatewayv1.Kind("HTTPRoute"), gatewayv1.Namespace(route.Namespace)
	res.Ancestors = append(res.Ancestors, gatewayv1.PolicyAncestorStatus{
		AncestorRef:    gatewayv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gatewayv1.ObjectName(route.Name)},
		ControllerName: ControllerName,
		Conditions:     []metav1.Condition{acceptedCondition(0, metav1.ConditionFalse, ReasonTargetInvalid, msg)},
	})
}

func acceptedCondition(generation int64, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: string(gatewayv1.PolicyConditionAccepted), Status: status, Reason: reason, Message: msg, ObservedGeneration: generation}
}

func isGateway(ref gatewayv1.ParentReference, g types.NamespacedName) bool {
	return ref.Kind != nil && *ref.Kind == "Gateway" && string(ref.Name) == g.Name && ref.Namespace != nil && string(*ref.Namespace) == g.Namespace
}

func hasRule(route *gatewayv1.HTTPRoute, name string) bool {
	return slices.ContainsFunc(route.Spec.Rules, func(r gatewayv1.HTTPRouteRule) bool { return r.Name != nil && string(*r.Name) == name })
}

// parentGateways are the Gateways a route's parentRefs name.
func parentGateways(route *gatewayv1.HTTPRoute) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ref := range route.Spec.ParentRefs {
		if g, ok := parentGateway(route.Namespace, ref); ok && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// parentGateway is the Gateway a parentRef of a route in namespace ns
// names; ok is false for other kinds of parent.
func parentGateway(ns string, ref gatewayv1.ParentReference) (types.NamespacedName, bool) {
	if ref.Group != nil && *ref.Group != gatewayGroup || ref.Kind != nil && *ref.Kind != "Gateway" {
		return types.NamespacedName{}, false
	}
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// routesByGateway lists every HTTPRoute of the cluster by the Gateways its
// parentRefs name: the precedence of a targeted route's matches depends on
// the other routes of its Gateways, whoever owns them.
func (r *TargetResolver) routesByGateway(ctx context.Context) (map[types.NamespacedName][]*gatewayv1.HTTPRoute, error) {
	var list gatewayv1.HTTPRouteList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[types.NamespacedName][]*gatewayv1.HTTPRoute{}
	for i := range list.Items {
		route := &list.Items[i]
		for _, g := range parentGateways(route) {
			out[g] = append(out[g], route)
		}
	}
	return out, nil
}

// routeTable is a Gateway's routing: every match of every rule of every
// route attached to it, with its hostnames narrowed by the listeners that
// accept it, ordered by route age and name, then rule and match order.
// unattached says why each targeted route that names the Gateway is not
// attached to it.
func routeTable(ctx context.Context, att *attacher, gw *gatewayv1.Gateway, routes []*gatewayv1.HTTPRoute, targets map[types.NamespacedName][]string) (table policy.RouteTable, unattached []string, err error) {
	slices.SortFunc(routes, func(a, b *gatewayv1.HTTPRoute) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	table = policy.RouteTable{Gateway: gw.Namespace + "/" + gw.Name}
	for rank, route := range routes {
		key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
		sections, isTarget := targets[key]
		a, err := att.attach(ctx, gw, route)
		if err != nil {
			return table, nil, err
		}
		if len(a.listeners) == 0 {
			if isTarget {
				unattached = append(unattached, "HTTPRoute "+key.String()+": "+strings.Join(a.why, "; "))
			}
			continue
		}
		hostnames := effectiveHostnames(gw, a.listeners, route.Spec.Hostnames)
		for ri, rule := range route.Spec.Rules {
			ruleName := strconv.Itoa(ri)
			if rule.Name != nil {
				ruleName = string(*rule.Name)
			}
			targeted := isTarget && (slices.Contains(sections, "") || rule.Name != nil && slices.Contains(sections, string(*rule.Name)))
			matches := rule.Matches
			if len(matches) == 0 {
				matches = []gatewayv1.HTTPRouteMatch{{}} // no matches: every request (PathPrefix "/")
			}
			for mi, m := range matches {
				e := routeEntry(m)
				e.Hostnames, e.Targeted = hostnames, targeted
				e.Order = rank<<20 | ri<<10 | mi
				e.Route, e.Rule = key.String(), ruleName
				table.Entries = append(table.Entries, e)
			}
		}
	}
	return table, unattached, nil
}

// routeEntry translates one HTTPRouteMatch, with Gateway API's defaults.
func routeEntry(m gatewayv1.HTTPRouteMatch) policy.RouteEntry {
	e := policy.RouteEntry{Path: policy.RoutePathMatch{Type: policy.PathPrefix, Value: "/"}}
	if m.Path != nil {
		if m.Path.Type != nil {
			e.Path.Type = string(*m.Path.Type)
		}
		if m.Path.Value != nil {
			e.Path.Value = *m.Path.Value
		}
	}
	if m.Method != nil {
		e.Method = string(*m.Method)
	}
	for _, h := range m.Headers {
		v := policy.RouteValueMatch{Type: policy.MatchExact, Name: string(h.Name), Value: h.Value}
		if h.Type != nil {
			v.Type = string(*h.Type)
		}
		e.Headers = append(e.Headers, v)
	}
	for _, q := range m.QueryParams {
		v := policy.RouteValueMatch{Type: policy.MatchExact, Name: string(q.Name), Value: q.Value}
		if q.Type != nil {
			v.Type = string(*q.Type)
		}
		e.QueryParams = append(e.QueryParams, v)
	}
	return e
}

// listenerTable is a Gateway target's routing: one entry per listener with
// its hostname, those named in sections targeted ("" in sections: all).
func listenerTable(gw *gatewayv1.Gateway, sections []string) policy.RouteTable {
	table := policy.RouteTable{Gateway: gw.Namespace + "/" + gw.Name}
	for i, l := range gw.Spec.Listeners {
		e := policy.RouteEntry{Order: i, Route: "Gateway " + gw.Name, Rule: "listener " + string(l.Name),
			Targeted: slices.Contains(sections, "") || slices.Contains(sections, string(l.Name))}
		if l.Hostname != nil {
			e.Hostnames = []string{string(*l.Hostname)}
		}
		table.Entries = append(table.Entries, e)
	}
	return table
}

// effectiveHostnames intersects a route's hostnames with those of the
// listeners that accept it (attacher.attach has found each of them to
// share a host with the route). An empty list means any host.
func effectiveHostnames(gw *gatewayv1.Gateway, listeners []string, routeHosts []gatewayv1.Hostname) []string {
	var hosts []string
	for _, l := range gw.Spec.Listeners {
		if !slices.Contains(listeners, string(l.Name)) {
			continue
		}
		if l.Hostname == nil {
			if len(routeHosts) == 0 {
				return nil // any host
			}
			for _, h := range routeHosts {
				hosts = appendUnique(hosts, string(h))
			}
			continue
		}
		lh := string(*l.Hostname)
		if len(routeHosts) == 0 {
			hosts = appendUnique(hosts, lh)
			continue
		}
		for _, h := range routeHosts {
			if in, ok := intersectHostname(lh, string(h)); ok {
				hosts = appendUnique(hosts, in)
			}
		}
	}
	return hosts
}

// intersectHostname is the more specific of two hostnames when one
// covers the other ("*.example.com" and "a.example.com" give
// "a.example.com"); ok is false when they share no host.
func intersectHostname(a, b string) (string, bool) {
	a, b = strings.ToLower(a), strings.ToLower(b)
	covers := func(wild, h string) bool {
		suffix, ok := strings.CutPrefix(wild, "*")
		return ok && len(h) > len(suffix) && strings.HasSuffix(h, suffix)
	}
	switch {
	case a == b:
		return a, true
	case covers(a, b):
		return b, true
	case covers(b, a):
		return a, true
	}
	return "", false
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
