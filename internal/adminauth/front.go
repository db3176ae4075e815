// Package adminauth is the admin API's front in a cluster: the admin API is
// an aggregated API (an APIService served by the controller), so
// kube-apiserver authenticates the user and proxies the call with the user
// in headers over mTLS. The front believes those headers only from
// kube-apiserver's front-proxy certificate, authorizes each call with a
// SubjectAccessReview against the policy it touches before the admin API
// reads anything, serves discovery, and serves it all over TLS on its own
// port.
package adminauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/sluice-dev/sluice/internal/admin"
)

// GroupVersion and BasePath are the admin API's, as the APIService names them.
const (
	GroupVersion = "admin.ratelimit.sluice.dev/v1alpha1"
	BasePath     = "/apis/" + GroupVersion
)

// Front authenticates, authorizes and serves discovery in front of the
// admin API.
type Front struct {
	// Inner is the admin API, called only for authorized calls, with the
	// user in its context (admin.CallerFrom).
	Inner http.Handler
	// Trust is the front-proxy configuration, followed from its ConfigMap.
	Trust *Trust
	// Reviews creates the SubjectAccessReviews.
	Reviews authorizationclient.SubjectAccessReviewInterface
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rh, err := f.Trust.current()
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	u, err := rh.authenticate(r)
	if err != nil && !errors.Is(err, errNoUser) {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), BasePath)
	if !ok || (rest != "" && rest[0] != '/') {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the server could not find %s", r.URL.Path))
		return
	}
	// kube-apiserver authorizes discovery itself and checks availability
	// without a user.
	if rest == "" || rest == "/" {
		if r.Method != http.MethodGet {
			writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s (GET is)", r.Method, BasePath))
			return
		}
		writeJSON(w, http.StatusOK, discovery)
		return
	}
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	need, found := route(r.Method, rest)
	switch found {
	case notFound:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the server could not find %s", r.URL.Path))
		return
	case methodNotAllowed:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	allowed, err := f.authorize(r, u, need)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "authorization failed: "+err.Error())
		return
	}
	if !allowed {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("forbidden: you need %s on ratelimitpolicies/%s in namespace %s", need.verb, need.subresource, need.namespace))
		return
	}
	f.Inner.ServeHTTP(w, r.WithContext(admin.WithCaller(r.Context(), u.name)))
}

// authorize asks the API server whether u may do what the call needs.
func (f *Front) authorize(r *http.Request, u user, need access) (bool, error) {
	review, err := f.Reviews.Create(r.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   u.name,
			UID:    u.uid,
			Groups: u.groups,
			Extra:  u.extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   need.namespace,
				Verb:        need.verb,
				Group:       Group,
				Resource:    "ratelimitpolicies",
				Subresource: need.subresource,
				Name:        need.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return review.Status.Allowed, nil
}

// discovery is the admin API's resources, each a subresource of the
// policies it acts on (kubectl maps no kind to them, so `kubectl get
// ratelimitpolicies` keeps meaning the policies), and explain.
var discovery = &metav1.APIResourceList{
	TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
	GroupVersion: GroupVersion,
	APIResources: []metav1.APIResource{
		{Name: "explain", Namespaced: true, Kind: "Explanation", Verbs: metav1.Verbs{"create"}},
		{Name: "ratelimitpolicies/keys", Namespaced: true, Kind: "Keys", Verbs: metav1.Verbs{"get", "delete"}},
		{Name: "ratelimitpolicies/top", Namespaced: true, Kind: "TopOffenders", Verbs: metav1.Verbs{"get"}},
		{Name: "ratelimitpolicies/bans", Namespaced: true, Kind: "Bans", Verbs: metav1.Verbs{"get", "delete"}},
		{Name: "ratelimitpolicies/overrides", Namespaced: true, Kind: "Overrides", Verbs: metav1.Verbs{"get", "update", "delete"}},
	},
}

// writeStatus answers with a Kubernetes Status, which client-go and
// kubectl render.
func writeStatus(w http.ResponseWriter, code int32, reason metav1.StatusReason, message string) {
	writeJSON(w, int(code), &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     code,
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
