package adminauth

import (
	"net/http"
	"testing"
)

// The contract's table, and paths that are none of its calls: the front
// refuses those before any SubjectAccessReview, and reads a path's
// segments as the admin API's ServeMux does.
func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		method, rest string
		want         access
		result       routeResult
	}{
		{http.MethodPost, "/namespaces/shop/explain", access{"get", "keys", "shop", ""}, routed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/keys", access{"get", "keys", "shop", "p"}, routed},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/keys", access{"update", "keys", "shop", "p"}, routed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/top", access{"get", "keys", "shop", "p"}, routed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/bans", access{"get", "keys", "shop", "p"}, routed},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/bans", access{"update", "keys", "shop", "p"}, routed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/overrides", access{"get", "overrides", "shop", "p"}, routed},
		{http.MethodPut, "/namespaces/shop/ratelimitpolicies/p/overrides", access{"update", "overrides", "shop", "p"}, routed},
		{http.MethodDelete, "/namespaces/shop/ratelimitpolicies/p/overrides", access{"update", "overrides", "shop", "p"}, routed},
		// An escaped segment is one segment, unescaped.
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/a%2Fb/keys", access{"get", "keys", "shop", "a/b"}, routed},

		{http.MethodGet, "/namespaces/shop/explain", access{}, methodNotAllowed},
		{http.MethodPut, "/namespaces/shop/ratelimitpolicies/p/keys", access{}, methodNotAllowed},
		{http.MethodPost, "/namespaces/shop/ratelimitpolicies/p/top", access{}, methodNotAllowed},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/status", access{}, notFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p", access{}, notFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/p/keys/", access{}, notFound},
		{http.MethodGet, "/namespaces/other/ratelimitpolicies/../../shop/ratelimitpolicies/p/keys", access{}, notFound},
		{http.MethodGet, "/namespaces//ratelimitpolicies/p/keys", access{}, notFound},
		{http.MethodGet, "/namespaces/shop/ratelimitpolicies/%zz/keys", access{}, notFound},
		{http.MethodGet, "/ratelimitpolicies/p/keys", access{}, notFound},
		{http.MethodPost, "/namespaces/shop/widgets/explain", access{}, notFound},
	} {
		got, result := route(tc.method, tc.rest)
		if got != tc.want || result != tc.result {
			t.Errorf("%s %s: %+v %v, want %+v %v", tc.method, tc.rest, got, result, tc.want, tc.result)
		}
	}
}
