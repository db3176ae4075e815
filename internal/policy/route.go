package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Routes is what a policy's targetRefs resolve to: for each Gateway a
// target attaches to, the Gateway's routing table in the terms of Gateway
// API's HTTPRoute matching. The controller resolves it from the cluster's
// Gateways and HTTPRoutes and writes it into the policy table beside the
// spec, so check processes need no Kubernetes access to match a request to
// the route that receives it.
type Routes struct {
	Tables []RouteTable `json:"tables"`
}

// RouteTable is the routing of one Gateway: every match of every rule of
// every route attached to it, each marked when it belongs to a target. A
// request belongs to the entry Gateway API's precedence picks among those
// it matches; the policy applies when that entry is a target's.
type RouteTable struct {
	// Gateway names the table ("namespace/name"), for messages.
	Gateway string       `json:"gateway"`
	Entries []RouteEntry `json:"entries"`
}

// RouteEntry is one match of one route rule (or one listener, for a
// Gateway target), with the hostnames it serves.
type RouteEntry struct {
	// Hostnames are the route's hostnames as its listener narrows them:
	// exact, or "*.suffix" for any subdomain; empty: any host.
	Hostnames []string `json:"hostnames,omitempty"`
	// Path is the path match; an empty type matches every path (a Gateway
	// or listener target).
	Path RoutePathMatch `json:"path,omitempty"`
	// Method, when set, is the one method matched.
	Method      string            `json:"method,omitempty"`
	Headers     []RouteValueMatch `json:"headers,omitempty"`
	QueryParams []RouteValueMatch `json:"queryParams,omitempty"`
	// Order breaks the ties Gateway API leaves after the match's own
	// specificity: older routes first, then by namespace/name, then rules
	// and matches in list order. Lower wins.
	Order int `json:"order"`
	// Route names the entry's route ("namespace/name") and Rule its rule
	// (name or index), for messages.
	Route string `json:"route,omitempty"`
	Rule  string `json:"rule,omitempty"`
	// Targeted marks the entries of the policy's targets.
	Targeted bool `json:"targeted,omitempty"`
}

// Path match types, as Gateway API names them.
const (
	PathExact             = "Exact"
	PathPrefix            = "PathPrefix"
	PathRegularExpression = "RegularExpression"
)

// RoutePathMatch is an HTTPPathMatch.
type RoutePathMatch struct {
	Type  string `json:"type,omitempty"`
	Value string `json:"value,omitempty"`
}

// RouteValueMatch is an HTTPHeaderMatch or HTTPQueryParamMatch: Exact or
// RegularExpression.
type RouteValueMatch struct {
	Type  string `json:"type,omitempty"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Value match types.
const (
	MatchExact             = "Exact"
	MatchRegularExpression = "RegularExpression"
)

// compiledRoutes is Routes ready to match requests.
type compiledRoutes struct {
	tables [][]compiledEntry
}

type compiledEntry struct {
	exactHosts   []string
	hostSuffixes []string // ".example.com" for "*.example.com"
	pathType     string
	pathValue    string
	pathRegex    *regexp.Regexp
	method       string
	headers      []compiledValue
	query        []compiledValue
	order        int
	targeted     bool
}

type compiledValue struct {
	name  string // canonical header name, or the query parameter's
	value string
	regex *regexp.Regexp
}

func compileRoutes(r *Routes) (*compiledRoutes, error) {
	c := &compiledRoutes{}
	for _, t := range r.Tables {
		var table []compiledEntry
		for ei, e := range t.Entries {
			ce, err := compileRouteEntry(&e)
			if err != nil {
				return nil, fmt.Errorf("routes of %s, entry %d (%s %s): %w", t.Gateway, ei, e.Route, e.Rule, err)
			}
			table = append(table, ce)
		}
		c.tables = append(c.tables, table)
	}
	return c, nil
}

func compileRouteEntry(e *RouteEntry) (compiledEntry, error) {
	ce := compiledEntry{pathType: e.Path.Type, pathValue: e.Path.Value, method: e.Method, order: e.Order, targeted: e.Targeted}
	for _, h := range e.Hostnames {
		h = strings.ToLower(h)
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			ce.hostSuffixes = append(ce.hostSuffixes, suffix)
		} else {
			ce.exactHosts = append(ce.exactHosts, h)
		}
	}
	switch e.Path.Type {
	case "", PathExact:
	case PathPrefix:
		// A trailing '/' is ignored: "/abc/" is the prefix "/abc".
		ce.pathValue = strings.TrimRight(e.Path.Value, "/")
	case PathRegularExpression:
		re, err := regexp.Compile("^(?:" + e.Path.Value + ")$")
		if err != nil {
			return ce, fmt.Errorf("path regular expression: %w", err)
		}
		ce.pathRegex = re
	default:
		return ce, fmt.Errorf("unknown path match type %q", e.Path.Type)
	}
	var err error
	if ce.headers, err = compileValues(e.Headers, true); err != nil {
		return ce, fmt.Errorf("header match: %w", err)
	}
	if ce.query, err = compileValues(e.QueryParams, false); err != nil {
		return ce, fmt.Errorf("query parameter match: %w", err)
	}
	return ce, nil
}

func compileValues(ms []RouteValueMatch, headers bool) ([]compiledValue, error) {
	var out []compiledValue
	for _, m := range ms {
		cv := compiledValue{name: m.Name, value: m.Value}
		if headers {
			cv.name = http.CanonicalHeaderKey(m.Name)
		}
		switch m.Type {
		case "", MatchExact:
		case MatchRegularExpression:
			re, err := regexp.Compile("^(?:" + m.Value + ")$")
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
			cv.regex = re
		default:
			return nil, fmt.Errorf("%s: unknown match type %q", m.Name, m.Type)
		}
		out = append(out, cv)
	}
	return out, nil
}

// matches reports whether any Gateway's routing gives some reading of
// r's path to a target: no spelling of the path can move a request out
// of a targeted route.
func (c *compiledRoutes) matches(r *Request) bool {
	for _, table := range c.tables {
		if owner := bestEntry(table, r, r.Path); owner != nil && owner.targeted {
			return true
		}
		for _, p := range r.AltPaths {
			if p == "" {
				continue
			}
			if owner := bestEntry(table, r, p); owner != nil && owner.targeted {
				return true
			}
		}
	}
	return false
}

// bestEntry is the entry Gateway API's precedence gives the request with
// path: among the matching entries, the most specific hostname, then an
// exact path, the longest prefix, a method, the most header matches, the
// most query matches, and last the lowest order.
func bestEntry(table []compiledEntry, r *Request, path string) *compiledEntry {
	var best *compiledEntry
	var bestRank rank
	for i := range table {
		e := &table[i]
		host, ok := e.hostScore(r.Host)
		if !ok || !e.matchesRequest(r, path) {
			continue
		}
		rk := e.rank(host)
		if best == nil || rk.before(bestRank) {
			best, bestRank = e, rk
		}
	}
	return best
}

// rank orders entries for one request; see bestEntry.
type rank struct {
	host     int // hostScore
	pathKind int // 3 exact, 2 prefix, 1 regular expression, 0 any
	pathLen  int
	method   bool
	headers  int
	query    int
	order    int
}

func (a rank) before(b rank) bool {
	switch {
	case a.host != b.host:
		return a.host > b.host
	case a.pathKind != b.pathKind:
		return a.pathKind > b.pathKind
	case a.pathLen != b.pathLen:
		return a.pathLen > b.pathLen
	case a.method != b.method:
		return a.method
	case a.headers != b.headers:
		return a.headers > b.headers
	case a.query != b.query:
		return a.query > b.query
	}
	return a.order < b.order
}

func (e *compiledEntry) rank(host int) rank {
	rk := rank{host: host, method: e.method != "", headers: len(e.headers), query: len(e.query), order: e.order}
	switch e.pathType {
	case PathExact:
		rk.pathKind, rk.pathLen = 3, len(e.pathValue)
	case PathPrefix:
		rk.pathKind, rk.pathLen = 2, len(e.pathValue)
	case PathRegularExpression:
		rk.pathKind = 1
	}
	return rk
}

// hostScore says whether the entry serves host, and how specifically:
// Gateway API prefers the route with the most characters in a matching
// non-wildcard hostname, then in a matching hostname. An exact match
// scores above every wildcard; no hostnames (any host) scores lowest.
func (e *compiledEntry) hostScore(host string) (int, bool) {
	if len(e.exactHosts) == 0 && len(e.hostSuffixes) == 0 {
		return 0, true
	}
	score, ok := 0, false
	for _, h := range e.exactHosts {
		if h == host {
			score, ok = max(score, 1<<20+len(h)), true
		}
	}
	for _, s := range e.hostSuffixes {
		if len(host) > len(s) && strings.HasSuffix(host, s) {
			score, ok = max(score, 1+len(s)), true
		}
	}
	return score, ok
}

// matchesRequest tests the entry's path, method, headers and query.
func (e *compiledEntry) matchesRequest(r *Request, path string) bool {
	switch e.pathType {
	case PathExact:
		if path != e.pathValue {
			return false
		}
	case PathPrefix:
		if !segmentPrefix(path, e.pathValue) {
			return false
		}
	case PathRegularExpression:
		if !e.pathRegex.MatchString(path) {
			return false
		}
	}
	// A route's method match is exact (a HEAD goes to another route, or
	// none), unlike spec.match.methods, whose GET covers HEAD.
	if e.method != "" && e.method != r.Method {
		return false
	}
	for _, h := range e.headers {
		values := r.Header[h.name]
		if len(values) == 0 || !h.matches(values[0]) {
			return false
		}
	}
	for _, q := range e.query {
		v, ok := lookupQuery(r.RawQuery, q.name)
		if !ok || !q.matches(v) {
			return false
		}
	}
	return true
}

func (v *compiledValue) matches(s string) bool {
	if v.regex != nil {
		return v.regex.MatchString(s)
	}
	return s == v.value
}

// segmentPrefix is Gateway API's PathPrefix: prefix matches path element
// by element ("/abc" matches "/abc", "/abc/" and "/abc/def", not
// "/abcd"). prefix has no trailing '/', so "" is the prefix "/".
func segmentPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}
