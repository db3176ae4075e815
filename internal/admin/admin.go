// Package admin is the admin API: explain a request, inspect and reset a
// key value's limits, list and lift bans, all through the checker of the
// process and the store it runs on, at the paths of the API group
// admin.ratelimit.sluice.dev/v1alpha1 (the same in local mode and behind
// the API server in a cluster). Errors are metav1.Status objects, so
// client-go and kubectl render them; every change is logged with its
// caller (CallerFrom).
package admin

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// Group and Version of the admin API; Base is the path its routes are under.
const (
	Group   = "admin.ratelimit.sluice.dev"
	Version = "v1alpha1"
	Base    = "/apis/" + Group + "/" + Version
)

// Options configure a Handler.
type Options struct {
	Checker *check.Checker
	// Overrides, when set, serves the overrides routes (run-time ones set
	// and deleted, both sources listed).
	Overrides *overrides.Runtime
	// Top, when set, serves the top key values route.
	Top topkeys.Source
	// Logger receives every change (reset, lift) with its caller.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Handler serves the admin API. Who calls is the request context's
// (WithCaller): the server in front of it says.
type Handler struct {
	checker   *check.Checker
	overrides *overrides.Runtime
	topKeys   topkeys.Source
	log       *slog.Logger
	now       func() time.Time
	routes    []route
}

// route is one method on one path under Base, whose segments in braces
// ("{namespace}") are read with r.PathValue.
type route struct {
	method   string
	segments []string
	// resource names the route's resource in discovery
	// ("ratelimitpolicies/keys"); "" for none.
	resource string
	verb     string
	handle   http.HandlerFunc
}

// New returns a Handler serving explain, keys (inspect, reset) and bans
// (list, lift), and top key values and overrides when Options has them.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Handler{checker: o.Checker, overrides: o.Overrides, topKeys: o.Top, log: o.Logger, now: o.Now}
	h.Handle(http.MethodPost, "/namespaces/{namespace}/explain", "explain", "create", h.explain)
	h.Handle(http.MethodGet, "/namespaces/{namespace}/ratelimitpolicies/{name}/keys", "ratelimitpolicies/keys", "get", h.inspect)
	h.Handle(http.MethodDelete, "/namespaces/{namespace}/ratelimitpolicies/{name}/keys", "ratelimitpolicies/keys", "delete", h.reset)
	h.Handle(http.MethodGet, "/namespaces/{namespace}/ratelimitpolicies/{name}/bans", "ratelimitpolicies/bans", "get", h.bans)
	h.Handle(http.MethodDelete, "/namespaces/{namespace}/ratelimitpolicies/{name}/bans", "ratelimitpolicies/bans", "delete", h.lift)
	if o.Top != nil {
		h.Handle(http.MethodGet, "/namespaces/{namespace}/ratelimitpolicies/{name}/top", "ratelimitpolicies/top", "get", h.top)
	}
	if o.Overrides != nil {
		const path = "/namespaces/{namespace}/ratelimitpolicies/{name}/overrides"
		h.Handle(http.MethodGet, path, "ratelimitpolicies/overrides", "get", h.listOverrides)
		h.Handle(http.MethodPut, path, "ratelimitpolicies/overrides", "update", h.setOverride)
		h.Handle(http.MethodDelete, path, "ratelimitpolicies/overrides", "delete", h.deleteOverride)
	}
	return h
}

// Handle adds a route: method on path under Base ("/namespaces/{namespace}/..."),
// listed in discovery as resource with verb.
func (h *Handler) Handle(method, path, resource, verb string, handle http.HandlerFunc) {
	h.routes = append(h.routes, route{method: method, segments: strings.Split(strings.Trim(path, "/"), "/"), resource: resource, verb: verb, handle: handle})
}

// ServeHTTP implements http.Handler: the route of r's path and method,
// discovery at Base, 404 for an unknown path and 405 for a known path
// with another method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, Base)
	if !ok || rest != "" && rest[0] != '/' {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such path: the admin API is under "+Base)
		return
	}
	rest = strings.Trim(rest, "/")
	if rest == "" {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, []string{http.MethodGet})
			return
		}
		h.discovery(w)
		return
	}
	segments := strings.Split(rest, "/")
	var allowed []string
	for i := range h.routes {
		rt := &h.routes[i]
		if !rt.matches(segments, r) {
			continue
		}
		if rt.method != r.Method {
			allowed = append(allowed, rt.method)
			continue
		}
		rt.handle(w, r)
		return
	}
	if len(allowed) > 0 {
		methodNotAllowed(w, allowed)
		return
	}
	writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such path: "+r.URL.Path)
}

// matches reports whether segments are the route's path, and sets r's
// path values when they are.
func (rt *route) matches(segments []string, r *http.Request) bool {
	if len(segments) != len(rt.segments) {
		return false
	}
	for i, s := range rt.segments {
		if s == segments[i] {
			continue
		}
		if !strings.HasPrefix(s, "{") || segments[i] == "" {
			return false
		}
	}
	for i, s := range rt.segments {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			r.SetPathValue(strings.TrimSuffix(name, "}"), segments[i])
		}
	}
	return true
}

func methodNotAllowed(w http.ResponseWriter, allowed []string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "method not allowed here; allowed: "+strings.Join(allowed, ", "))
}

// discovery answers an APIResourceList of the routes' resources.
func (h *Handler) discovery(w http.ResponseWriter) {
	list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version}
	index := map[string]int{}
	for _, rt := range h.routes {
		i, ok := index[rt.resource]
		if !ok {
			i = len(list.APIResources)
			index[rt.resource] = i
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: rt.resource, Namespaced: true, Kind: kindOf(rt.resource)})
		}
		list.APIResources[i].Verbs = append(list.APIResources[i].Verbs, rt.verb)
	}
	writeJSON(w, http.StatusOK, list)
}

// kindOf names a resource's kind: "ratelimitpolicies/keys" is Keys.
func kindOf(resource string) string {
	last := resource[strings.LastIndexByte(resource, '/')+1:]
	return strings.ToUpper(last[:1]) + last[1:]
}
