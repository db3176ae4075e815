package admin

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Access is what a call needs in a cluster, where the front
// (internal/adminauth) asks the API server before the call is served:
// Verb on the Subresource of ratelimitpolicies in Namespace, of the
// policy Name ("" for a call on the namespace, explain).
type Access struct {
	Verb, Subresource, Namespace, Name string
}

// What the calls need: reading a policy's keys (inspect, top, bans,
// explain) or changing them (reset, lift), reading or changing its
// overrides.
var (
	getKeys         = Access{Verb: "get", Subresource: "keys"}
	updateKeys      = Access{Verb: "update", Subresource: "keys"}
	getOverrides    = Access{Verb: "get", Subresource: "overrides"}
	updateOverrides = Access{Verb: "update", Subresource: "overrides"}
)

// call is one method on one path under Base: the table the Handler
// serves, discovery lists, the front authorizes and the user roles grant
// (Rules), so the four agree.
type call struct {
	method string
	// segments of the path; those in braces ("{namespace}") are read
	// with r.PathValue.
	segments []string
	// resource and kind name the call's resource in discovery, verb its
	// verb there.
	resource, kind, verb string
	need                 Access
}

// The admin API's calls.
const (
	callExplain = iota
	callInspect
	callReset
	callBans
	callLift
	callTop
	callOverrides
	callSetOverride
	callDeleteOverride
	numCalls
)

var calls = [numCalls]call{
	callExplain:        newCall(http.MethodPost, "/namespaces/{namespace}/explain", "explain", "Explanation", "create", getKeys),
	callInspect:        newCall(http.MethodGet, policyPath+"/keys", "ratelimitpolicies/keys", "Keys", "get", getKeys),
	callReset:          newCall(http.MethodDelete, policyPath+"/keys", "ratelimitpolicies/keys", "Keys", "delete", updateKeys),
	callBans:           newCall(http.MethodGet, policyPath+"/bans", "ratelimitpolicies/bans", "Bans", "get", getKeys),
	callLift:           newCall(http.MethodDelete, policyPath+"/bans", "ratelimitpolicies/bans", "Bans", "delete", updateKeys),
	callTop:            newCall(http.MethodGet, policyPath+"/top", "ratelimitpolicies/top", "TopOffenders", "get", getKeys),
	callOverrides:      newCall(http.MethodGet, policyPath+"/overrides", "ratelimitpolicies/overrides", "Overrides", "get", getOverrides),
	callSetOverride:    newCall(http.MethodPut, policyPath+"/overrides", "ratelimitpolicies/overrides", "Overrides", "update", updateOverrides),
	callDeleteOverride: newCall(http.MethodDelete, policyPath+"/overrides", "ratelimitpolicies/overrides", "Overrides", "delete", updateOverrides),
}

const policyPath = "/namespaces/{namespace}/ratelimitpolicies/{name}"

func newCall(method, path, resource, kind, verb string, need Access) call {
	return call{method: method, segments: strings.Split(strings.Trim(path, "/"), "/"), resource: resource, kind: kind, verb: verb, need: need}
}

// Match is where a request's path and method lead.
type Match int

const (
	// MatchCall: one of the calls.
	MatchCall Match = iota
	// MatchDiscovery: the APIResourceList at Base.
	MatchDiscovery
	// MatchNotFound: no call has this path (or the path is not clean: a
	// mux would redirect it).
	MatchNotFound
	// MatchMethodNotAllowed: a call has this path, with other methods.
	MatchMethodNotAllowed
)

// Route finds the call of method on rest, the escaped path after Base,
// and what it needs. Segments are unescaped one by one, so a name holding
// an escaped "/" is one segment; the front and the Handler read the same
// namespace and name from it.
func Route(method, rest string) (Access, Match) {
	i, segs, m, _ := route(method, rest, func(int) bool { return true })
	if m != MatchCall {
		return Access{}, m
	}
	a := calls[i].need
	a.Namespace = segs[1]
	if len(segs) == 5 {
		a.Name = segs[3]
	}
	return a, MatchCall
}

// route finds the call of method on rest among those served says it
// serves: its index and the path's segments, or the methods the path
// allows when the method is not one of them.
func route(method, rest string, served func(int) bool) (int, []string, Match, []string) {
	if rest == "" || rest == "/" {
		if method != http.MethodGet {
			return 0, nil, MatchMethodNotAllowed, []string{http.MethodGet}
		}
		return 0, nil, MatchDiscovery, nil
	}
	if path.Clean(rest) != rest || strings.HasSuffix(rest, "/") {
		return 0, nil, MatchNotFound, nil
	}
	raw := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			return 0, nil, MatchNotFound, nil
		}
		segs[i] = u
	}
	var allowed []string
	for i := range calls {
		if !served(i) || !calls[i].matches(segs) {
			continue
		}
		if calls[i].method == method {
			return i, segs, MatchCall, nil
		}
		allowed = append(allowed, calls[i].method)
	}
	if len(allowed) > 0 {
		return 0, nil, MatchMethodNotAllowed, allowed
	}
	return 0, nil, MatchNotFound, nil
}

// matches reports whether segs are the call's path.
func (c *call) matches(segs []string) bool {
	if len(segs) != len(c.segments) {
		return false
	}
	for i, s := range c.segments {
		if s != segs[i] && !strings.HasPrefix(s, "{") {
			return false
		}
	}
	return true
}

// setPathValues gives r the values of the call's braced segments.
func (c *call) setPathValues(r *http.Request, segs []string) {
	for i, s := range c.segments {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			r.SetPathValue(strings.TrimSuffix(name, "}"), segs[i])
		}
	}
}

// Discovery is the APIResourceList of every call, as the front serves it
// in a cluster, where the controller's admin API serves them all.
func Discovery() *metav1.APIResourceList { return discoveryOf(func(int) bool { return true }) }

// discoveryOf is the APIResourceList of the calls served says are served:
// each resource a subresource of the policies it acts on (kubectl maps no
// kind to them, so `kubectl get ratelimitpolicies` keeps meaning the
// policies), and explain.
func discoveryOf(served func(int) bool) *metav1.APIResourceList {
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version}
	index := map[string]int{}
	for i, c := range calls {
		if !served(i) {
			continue
		}
		j, ok := index[c.resource]
		if !ok {
			j = len(list.APIResources)
			index[c.resource] = j
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: c.resource, Namespaced: true, Kind: c.kind})
		}
		list.APIResources[j].Verbs = append(list.APIResources[j].Verbs, c.verb)
	}
	return list
}
