package adminauth

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
)

// The ConfigMap in which kube-apiserver publishes how it proxies to
// aggregated APIs: the CA of its front-proxy client certificate, the names
// that certificate may carry and the headers that carry the user.
const (
	AuthenticationNamespace = "kube-system"
	AuthenticationConfigMap = "extension-apiserver-authentication"
)

// requestHeader is kube-apiserver's front-proxy configuration: who may
// assert a user in headers, and in which headers.
type requestHeader struct {
	// roots verifies the front-proxy client certificate.
	roots *x509.CertPool
	// allowedNames are the common names the certificate may have (any
	// name when empty, as kube-apiserver's own --requestheader-allowed-names).
	allowedNames []string

	// The headers that name the user, its UID and groups, and the
	// prefixes of its extra attributes.
	usernameHeaders, uidHeaders, groupHeaders, extraPrefixes []string
}

// parseRequestHeader reads the extension-apiserver-authentication ConfigMap.
func parseRequestHeader(cm *corev1.ConfigMap) (*requestHeader, error) {
	caPEM := cm.Data["requestheader-client-ca-file"]
	if caPEM == "" {
		return nil, errors.New("requestheader-client-ca-file is empty: kube-apiserver runs without --requestheader-client-ca-file and cannot proxy to aggregated APIs")
	}
	rh := &requestHeader{roots: x509.NewCertPool()}
	if !rh.roots.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, errors.New("requestheader-client-ca-file holds no PEM certificate")
	}
	lists := []struct {
		key string
		to  *[]string
	}{
		{"requestheader-allowed-names", &rh.allowedNames},
		{"requestheader-username-headers", &rh.usernameHeaders},
		{"requestheader-uid-headers", &rh.uidHeaders},
		{"requestheader-group-headers", &rh.groupHeaders},
		{"requestheader-extra-headers-prefix", &rh.extraPrefixes},
	}
	for _, l := range lists {
		raw := cm.Data[l.key]
		if raw == "" {
			continue
		}
		if err := json.Unmarshal([]byte(raw), l.to); err != nil {
			return nil, fmt.Errorf("%s: %w", l.key, err)
		}
	}
	if len(rh.usernameHeaders) == 0 {
		return nil, errors.New("requestheader-username-headers is empty: no header names the user")
	}
	return rh, nil
}

// user is who kube-apiserver authenticated, as a SubjectAccessReview names it.
type user struct {
	name, uid string
	groups    []string
	extra     map[string]authorizationv1.ExtraValue
}

var errNoUser = errors.New("the front proxy named no user")

// authenticate believes r's user headers only when r comes with a client
// certificate from the front-proxy CA with an allowed name. It removes
// those headers, so the handlers behind see no identity but the context's.
// The certificate is checked here rather than in the TLS handshake so that
// a refusal is an HTTP 401 with a reason, and a changed CA applies to the
// next request.
func (rh *requestHeader) authenticate(r *http.Request) (user, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return user{}, errors.New("no client certificate: only kube-apiserver, with its front-proxy certificate, may call this API")
	}
	leaf := r.TLS.PeerCertificates[0]
	intermediates := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         rh.roots,
		Intermediates: intermediates,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return user{}, fmt.Errorf("client certificate not from the front-proxy CA: %w", err)
	}
	if len(rh.allowedNames) > 0 && !slices.Contains(rh.allowedNames, leaf.Subject.CommonName) {
		return user{}, fmt.Errorf("client certificate %q is not one of the front proxy's allowed names", leaf.Subject.CommonName)
	}
	u := user{
		name:   firstValue(r.Header, rh.usernameHeaders),
		uid:    firstValue(r.Header, rh.uidHeaders),
		groups: allValues(r.Header, rh.groupHeaders),
		extra:  extraValues(r.Header, rh.extraPrefixes),
	}
	for _, h := range slices.Concat(rh.usernameHeaders, rh.uidHeaders, rh.groupHeaders) {
		r.Header.Del(h)
	}
	for name := range r.Header {
		if hasPrefixFold(name, rh.extraPrefixes) {
			r.Header.Del(name)
		}
	}
	if u.name == "" {
		return u, errNoUser
	}
	return u, nil
}

func firstValue(h http.Header, names []string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

func allValues(h http.Header, names []string) []string {
	var out []string
	for _, n := range names {
		for _, v := range h.Values(n) {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// extraValues reads X-Remote-Extra-<key> headers: the key lower-cased and
// %-decoded, as kube-apiserver encodes it.
func extraValues(h http.Header, prefixes []string) map[string]authorizationv1.ExtraValue {
	out := map[string]authorizationv1.ExtraValue{}
	for _, prefix := range prefixes {
		for name, values := range h {
			if !hasPrefixFold(name, []string{prefix}) {
				continue
			}
			key := strings.ToLower(name[len(prefix):])
			if unescaped, err := url.PathUnescape(key); err == nil {
				key = unescaped
			}
			out[key] = append(out[key], values...)
		}
	}
	return out
}

func hasPrefixFold(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return true
		}
	}
	return false
}
