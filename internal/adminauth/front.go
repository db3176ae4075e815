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

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/admin"
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
		admin.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	u, err := rh.authenticate(r)
	if err != nil && !errors.Is(err, errNoUser) {
		admin.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), admin.Base)
	if !ok || (rest != "" && rest[0] != '/') {
		admin.WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the server could not find %s", r.URL.Path))
		return
	}
	need, match := admin.Route(r.Method, rest)
	// kube-apiserver authorizes discovery itself and checks availability
	// without a user.
	if match == admin.MatchDiscovery {
		writeJSON(w, http.StatusOK, discovery)
		return
	}
	if err != nil {
		admin.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "unauthorized: "+err.Error())
		return
	}
	switch match {
	case admin.MatchNotFound:
		admin.WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the server could not find %s", r.URL.Path))
		return
	case admin.MatchMethodNotAllowed:
		admin.WriteStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	allowed, err := f.authorize(r, u, need)
	if err != nil {
		admin.WriteStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "authorization failed: "+err.Error())
		return
	}
	if !allowed {
		admin.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("forbidden: you need %s on ratelimitpolicies/%s in namespace %s", need.Verb, need.Subresource, need.Namespace))
		return
	}
	f.Inner.ServeHTTP(w, r.WithContext(admin.WithCaller(r.Context(), u.name)))
}

// authorize asks the API server whether u may do what the call needs.
func (f *Front) authorize(r *http.Request, u user, need admin.Access) (bool, error) {
	review, err := f.Reviews.Create(r.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   u.name,
			UID:    u.uid,
			Groups: u.groups,
			Extra:  u.extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   need.Namespace,
				Verb:        need.Verb,
				Group:       ratelimitv1alpha1.GroupVersion.Group,
				Resource:    "ratelimitpolicies",
				Subresource: need.Subresource,
				Name:        need.Name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return review.Status.Allowed, nil
}

// discovery is every call of the admin API: the controller's serves them
// all.
var discovery = admin.Discovery()

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
