package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Namespaces are read for listeners whose allowedRoutes select routes'
// namespaces by label.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// attacher decides which listeners of a Gateway accept a route, as Gateway
// API's attachment rules say: a parentRef's sectionName and port select
// listeners; each listener's protocol, allowedRoutes.kinds and
// allowedRoutes.namespaces decide whether an HTTPRoute of the route's
// namespace may attach; the route's hostnames must intersect the
// listener's. A parent the implementation refused in the route's
// status.parents attaches nowhere. One attacher serves one resolution, so
// each namespace is read once.
type attacher struct {
	client   client.Reader
	nsLabels map[string]labels.Set
}

func newAttacher(c client.Reader) *attacher {
	return &attacher{client: c, nsLabels: map[string]labels.Set{}}
}

// attachment is how one route attaches to one Gateway.
type attachment struct {
	// listeners are the names of the listeners that accept the route.
	listeners []string
	// why says, for each parentRef to the Gateway that attached to no
	// listener, the reasons, for the ancestor status.
	why []string
}

// attach resolves every parentRef of route that names gw.
func (a *attacher) attach(ctx context.Context, gw *gatewayv1.Gateway, route *gatewayv1.HTTPRoute) (attachment, error) {
	var out attachment
	gwKey := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	for _, ref := range route.Spec.ParentRefs {
		if g, ok := parentGateway(route.Namespace, ref); !ok || g != gwKey {
			continue
		}
		if refusal := refusedParent(route, ref); refusal != "" {
			out.why = append(out.why, refusal)
			continue
		}
		var reasons []string
		selected, attached := false, false
		for i := range gw.Spec.Listeners {
			l := &gw.Spec.Listeners[i]
			if ref.SectionName != nil && *ref.SectionName != l.Name || ref.Port != nil && *ref.Port != l.Port {
				continue
			}
			selected = true
			reason, err := a.refusal(ctx, l, gw.Namespace, route)
			if err != nil {
				return attachment{}, err
			}
			if reason != "" {
				reasons = append(reasons, "listener "+string(l.Name)+": "+reason)
				continue
			}
			attached = true
			if !slices.Contains(out.listeners, string(l.Name)) {
				out.listeners = append(out.listeners, string(l.Name))
			}
		}
		switch {
		case !selected:
			out.why = append(out.why, "parentRef "+describeRef(ref)+" selects no listener of the Gateway")
		case !attached:
			out.why = append(out.why, strings.Join(reasons, "; "))
		}
	}
	return out, nil
}

// refusal is why listener l of a Gateway in gwNamespace does not accept
// route ("" when it does).
func (a *attacher) refusal(ctx context.Context, l *gatewayv1.Listener, gwNamespace string, route *gatewayv1.HTTPRoute) (string, error) {
	if reason := kindRefusal(l); reason != "" {
		return reason, nil
	}
	reason, err := a.namespaceRefusal(ctx, l, gwNamespace, route.Namespace)
	if reason != "" || err != nil {
		return reason, err
	}
	if l.Hostname != nil && len(route.Spec.Hostnames) > 0 &&
		!slices.ContainsFunc(route.Spec.Hostnames, func(h gatewayv1.Hostname) bool { _, ok := intersectHostname(string(*l.Hostname), string(h)); return ok }) {
		return fmt.Sprintf("its hostname %s does not intersect the route's hostnames", *l.Hostname), nil
	}
	return "", nil
}

// kindRefusal: an HTTPRoute attaches to HTTP and HTTPS listeners whose
// allowedRoutes.kinds, when set, list it.
func kindRefusal(l *gatewayv1.Listener) string {
	if l.Protocol != gatewayv1.HTTPProtocolType && l.Protocol != gatewayv1.HTTPSProtocolType {
		return "protocol " + string(l.Protocol) + " takes no HTTPRoutes"
	}
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return ""
	}
	for _, k := range l.AllowedRoutes.Kinds {
		if (k.Group == nil || *k.Group == gatewayGroup) && k.Kind == "HTTPRoute" {
			return ""
		}
	}
	return "allowedRoutes.kinds does not list HTTPRoute"
}

// namespaceRefusal applies allowedRoutes.namespaces (from: Same when
// unset).
func (a *attacher) namespaceRefusal(ctx context.Context, l *gatewayv1.Listener, gwNamespace, routeNamespace string) (string, error) {
	from := gatewayv1.NamespacesFromSame
	var selector *metav1.LabelSelector
	if l.AllowedRoutes != nil && l.AllowedRoutes.Namespaces != nil {
		if l.AllowedRoutes.Namespaces.From != nil {
			from = *l.AllowedRoutes.Namespaces.From
		}
		selector = l.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return "", nil
	case gatewayv1.NamespacesFromSame:
		if routeNamespace == gwNamespace {
			return "", nil
		}
		return fmt.Sprintf("allowedRoutes.namespaces.from is Same (namespace %s only), the route is in %s", gwNamespace, routeNamespace), nil
	case gatewayv1.NamespacesFromSelector:
		if selector == nil {
			return "allowedRoutes.namespaces.from is Selector without a selector", nil
		}
		sel, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return "allowedRoutes.namespaces.selector: " + err.Error(), nil
		}
		nsLabels, err := a.namespaceLabels(ctx, routeNamespace)
		if err != nil {
			return "", err
		}
		if sel.Matches(nsLabels) {
			return "", nil
		}
		return fmt.Sprintf("allowedRoutes.namespaces.selector (%s) does not select namespace %s", sel, routeNamespace), nil
	default: // None, or a value this version does not know: no route.
		return "allowedRoutes.namespaces.from is " + string(from), nil
	}
}

// namespaceLabels are a namespace's labels; a namespace not found has
// none.
func (a *attacher) namespaceLabels(ctx context.Context, name string) (labels.Set, error) {
	if l, ok := a.nsLabels[name]; ok {
		return l, nil
	}
	var ns corev1.Namespace
	if err := a.client.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil && !notFound(err) {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	a.nsLabels[name] = ns.Labels
	return ns.Labels, nil
}

// refusedParent is why the route's status says a Gateway implementation
// did not accept it through ref ("" when no entry does): the
// implementation knows what the spec alone does not (conflicts, its own
// limits). A condition older than the route's generation is not the
// current spec's answer, and the spec decides until the implementation
// answers again.
func refusedParent(route *gatewayv1.HTTPRoute, ref gatewayv1.ParentReference) string {
	for _, ps := range route.Status.Parents {
		if !sameParent(route.Namespace, ps.ParentRef, ref) {
			continue
		}
		c := apimeta.FindStatusCondition(ps.Conditions, string(gatewayv1.RouteConditionAccepted))
		if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != 0 && c.ObservedGeneration < route.Generation {
			continue
		}
		return fmt.Sprintf("%s did not accept the route through parentRef %s (status.parents: Accepted=False, %s: %s)",
			ps.ControllerName, describeRef(ref), c.Reason, c.Message)
	}
	return ""
}

// sameParent compares two parentRefs of a route in namespace ns, with
// Gateway API's defaults filled in.
func sameParent(ns string, a, b gatewayv1.ParentReference) bool {
	type norm struct {
		group, kind, ns, name, section string
		port                           gatewayv1.PortNumber
	}
	n := func(r gatewayv1.ParentReference) norm {
		out := norm{group: gatewayGroup, kind: "Gateway", ns: ns, name: string(r.Name)}
		if r.Group != nil {
			out.group = string(*r.Group)
		}
		if r.Kind != nil {
			out.kind = string(*r.Kind)
		}
		if r.Namespace != nil {
			out.ns = string(*r.Namespace)
		}
		if r.SectionName != nil {
			out.section = string(*r.SectionName)
		}
		if r.Port != nil {
			out.port = *r.Port
		}
		return out
	}
	return n(a) == n(b)
}

// describeRef is a parentRef for messages: name, then what selects
// listeners.
func describeRef(ref gatewayv1.ParentReference) string {
	s := string(ref.Name)
	if ref.SectionName != nil {
		s += ", sectionName " + string(*ref.SectionName)
	}
	if ref.Port != nil {
		s += fmt.Sprintf(", port %d", *ref.Port)
	}
	return s
}
