package admin

import (
	"net/http"
	"testing"
)

// The calls' table, and paths that are none of its calls: the front
// refuses those before any SubjectAccessReview, and reads a path's
// segments as the Handler does.
func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		method, rest string
		want         Access
		result       Match
	}{
		{http.MethodPost, "/namespaces/shop/explain", Access{"get", "keys", "shop", ""}, MatchCall},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/keys", Access{"get", "keys", "shop", "p"}, MatchCall},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/keys", Access{"update", "keys", "shop", "p"}, MatchCall},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/top", Access{"get", "keys", "shop", "p"}, MatchCall},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/bans", Access{"get", "keys", "shop", "p"}, MatchCall},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/bans", Access{"update", "keys", "shop", "p"}, MatchCall},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/overrides", Access{"get", "overrides", "shop", "p"}, MatchCall},
		{http.MethodPut, "/namespaces/shop/ratelimitpolicies/p/overrides", Access{"update", "overrides", "shop", "p"}, MatchCall},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/overrides", Access{"update", "overrides", "shop", "p"}, MatchCall},
		// An escaped segment is one segment, unescaped.
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/a%2Fb/keys", Access{"get", "keys", "shop", "a/b"}, MatchCall},

		{http.MethodGet, "/namespaces/shop/explain", Access{}, MatchMethodNotAllowed},
		{http.MethodPut, "/namespaces/shop/ratelimitpolicies/p/keys", Access{}, MatchMethodNotAllowed},
		{http.MethodPost, "/namespaces/shop/ratelimitpolicies/p/top", Access{}, MatchMethodNotAllowed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/status", Access{}, MatchNotFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p", Access{}, MatchNotFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/keys/", Access{}, MatchNotFound},
		{http.MethodGet, "/namespaces/other/ratelimitpolicies/../../shop/ratelimitpolicies/p/keys", Access{}, MatchNotFound},
		{http.MethodGet, "/namespaces//ratelimitpolicies/p/keys", Access{}, MatchNotFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/%zz/keys", Access{}, MatchNotFound},
		{http.MethodGet, "/ratelimitpolicies/p/keys", Access{}, MatchNotFound},
		{http.MethodPost, "/namespaces/shop/widgets/explain", Access{}, MatchNotFound},

		{http.MethodGet, "", Access{}, MatchDiscovery},
		{http.MethodGet, "/", Access{}, MatchDiscovery},
		{http.MethodPost, "", Access{}, MatchMethodNotAllowed},
	} {
		got, result := Route(tc.method, tc.rest)
		if got != tc.want || result != tc.result {
			t.Errorf("%s %s: %+v %v, want %+v %v", tc.method, tc.rest, got, result, tc.want, tc.result)
		}
	}
}
