package adminauth

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Group is the API group whose ratelimitpolicies subresources the admin
// API's calls are authorized against.
const Group = "ratelimit.sluice.dev"

// access is what a call needs: a verb on a subresource of
// ratelimitpolicies in a namespace (of one policy, or of all when name is
// empty).
type access struct {
	verb, subresource, namespace, name string
}

var (
	getKeys         = access{verb: "get", subresource: "keys"}
	updateKeys      = access{verb: "update", subresource: "keys"}
	getOverrides    = access{verb: "get", subresource: "overrides"}
	updateOverrides = access{verb: "update", subresource: "overrides"}
)

// namespaceCalls and policyCalls are the admin API's table: the last path
// segment, then the method, give the access a call needs.
var (
	namespaceCalls = map[string]map[string]access{
		"explain": {http.MethodPost: getKeys},
	}
	policyCalls = map[string]map[string]access{
		"keys":      {http.MethodGet: getKeys, http.MethodDelete: updateKeys},
		"top":       {http.MethodGet: getKeys},
		"bans":      {http.MethodGet: getKeys, http.MethodDelete: updateKeys},
		"overrides": {http.MethodGet: getOverrides, http.MethodPut: updateOverrides, http.MethodDelete: updateOverrides},
	}
)

// routeResult says whether a request is one of the admin API's calls.
type routeResult int

const (
	routed routeResult = iota
	notFound
	methodNotAllowed
)

// route finds the access r needs from its path under BasePath (rest, still
// escaped). Segments are unescaped one by one, as net/http's ServeMux does
// when it matches the handler behind, so both read the same namespace and
// name; a path that is not clean is no call (the mux would redirect it).
func route(method, rest string) (access, routeResult) {
	if rest == "" || path.Clean(rest) != rest || strings.HasSuffix(rest, "/") {
		return access{}, notFound
	}
	raw := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			return access{}, notFound
		}
		segs[i] = u
	}
	var calls map[string]map[string]access
	var a access
	switch {
	case len(segs) == 3 && segs[0] == "namespaces":
		calls, a = namespaceCalls, access{namespace: segs[1]}
	case len(segs) == 5 && segs[0] == "namespaces" && segs[2] == "ratelimitpolicies":
		calls, a = policyCalls, access{namespace: segs[1], name: segs[3]}
	default:
		return access{}, notFound
	}
	methods, ok := calls[segs[len(segs)-1]]
	if !ok {
		return access{}, notFound
	}
	need, ok := methods[method]
	if !ok {
		return access{}, methodNotAllowed
	}
	a.verb, a.subresource = need.verb, need.subresource
	return a, routed
}
