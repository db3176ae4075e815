package adminauth_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/adminauth"
	"github.com/sluice-dev/sluice/internal/testutil/certtest"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

const (
	base           = admin.Base
	keysPath       = base + "/namespaces/shop/ratelimitpolicies/per-tenant/keys?key=acme"
	bansPath       = base + "/namespaces/shop/ratelimitpolicies/per-tenant/bans?key=acme"
	topPath        = base + "/namespaces/shop/ratelimitpolicies/per-tenant/top"
	overridesPath  = base + "/namespaces/shop/ratelimitpolicies/per-tenant/overrides?key=acme"
	explainPath    = base + "/namespaces/shop/explain"
	otherKeysPath  = base + "/namespaces/other/ratelimitpolicies/per-tenant/keys?key=acme"
	proxyName      = "front-proxy-client"
	apiServiceName = "v1alpha1.admin.ratelimit.sluice.dev"
)

// recorder stands for the admin API: it answers every call it is given
// and remembers who made it.
type recorder struct {
	mu    sync.Mutex
	calls []string // "caller METHOD path"
	// leaked is set when an identity header reached it.
	leaked bool
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.calls = append(rec.calls, admin.CallerFrom(r.Context())+" "+r.Method+" "+r.URL.Path)
	rec.leaked = rec.leaked || r.Header.Get("X-Remote-User") != "" || r.Header.Get("X-Remote-Group") != ""
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}

// take returns the calls since the last take.
func (rec *recorder) take() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	calls := rec.calls
	rec.calls = nil
	return calls
}

type env struct {
	cluster  *kubetest.Cluster
	rec      *recorder
	addr     string // the front's own port
	proxyCA  *certtest.CA
	proxyCrt *certtest.Pair
}

// start runs kube-apiserver as a front proxy (its requestheader flags
// published in extension-apiserver-authentication), the front on a free
// loopback port as the controller's ServiceAccount with the RBAC of
// config/rbac, and the APIService pointing at it through an ExternalName
// Service, so that kube-apiserver proxies to the front for real.
func start(t *testing.T) *env {
	t.Helper()
	proxyCA := certtest.NewCA(t, "front-proxy-ca")
	proxyCrt := proxyCA.Client(t, proxyName)
	crds, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	c := kubetest.Start(t, kubetest.Options{CRDDirs: []string{crds}, APIServerFlags: map[string]string{
		"requestheader-client-ca-file":       proxyCA.File,
		"requestheader-allowed-names":        proxyName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             proxyCrt.CertFile,
		"proxy-client-key-file":              proxyCrt.KeyFile,
	}})
	root := kubetest.RepoRoot(t)
	kubetest.TrackFiles(t, filepath.Join(root, "config", "rbac"), filepath.Join(root, "config", "manager"))
	for _, ns := range []string{"sluice-system", "shop", "other"} {
		c.MustKubectl("create", "namespace", ns)
	}
	c.MustKubectl("apply", "-f", filepath.Join(root, "config", "rbac", "admin_api.yaml"), "-f", filepath.Join(root, "config", "rbac", "admin_user_roles.yaml"))
	aggregate(t, c.Config, "view", "edit", "admin")
	for user, role := range map[string]string{"viewer": "view", "editor": "edit", "owner": "admin",
		"sluice-viewer": "sluice-admin-view", "sluice-editor": "sluice-admin-edit", "overgranted": "view"} {
		c.MustKubectl("create", "rolebinding", user, "-n", "shop", "--clusterrole="+role, "--user="+user)
	}
	// overgranted may also make every call of the admin group: another
	// role's grant, which the front's own check still refuses.
	if _, err := c.KubectlStdin([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: every-admin-call, namespace: shop}
rules:
- {apiGroups: [admin.ratelimit.sluice.dev], resources: ["*"], verbs: ["*"]}
`), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	c.MustKubectl("create", "rolebinding", "overgranted-admin-calls", "-n", "shop", "--role=every-admin-call", "--user=overgranted")
	c.MustKubectl("create", "rolebinding", "stranger", "-n", "other", "--clusterrole=edit", "--user=stranger")

	port := systest.FreePort(t)
	e := &env{cluster: c, rec: &recorder{}, addr: "127.0.0.1:" + strconv.Itoa(port), proxyCA: proxyCA, proxyCrt: proxyCrt}
	srv, err := adminauth.NewServer(adminauth.Options{Listen: e.addr}, e.rec, restConfig(t, c.ServiceAccountKubeconfig("sluice-system", "sluice-controller")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("admin server: %v", err)
		}
	})

	c.MustKubectl("create", "service", "externalname", "sluice-controller-admin", "-n", "sluice-system", "--external-name=localhost")
	apiService := manifest(t, filepath.Join(root, "config", "manager", "admin_api.yaml"), "APIService")
	if err := unstructured.SetNestedField(apiService.Object, int64(port), "spec", "service", "port"); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(apiService.Object)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KubectlStdin(b, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	c.MustKubectl("wait", "--for=condition=Available", "apiservice/"+apiServiceName, "--timeout=60s")
	return e
}

func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// manifest is the object of kind in a multi-document YAML file.
func manifest(t *testing.T, file, kind string) *unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("%s holds no %s", file, kind)
			}
			t.Fatal(err)
		}
		if u := (&unstructured.Unstructured{Object: obj}); u.GetKind() == kind {
			return u
		}
	}
}

// aggregate does what kube-controller-manager's ClusterRole aggregation
// does (envtest runs none): each named role gets the rules of the roles
// its aggregationRule selects.
func aggregate(t *testing.T, cfg *rest.Config, names ...string) {
	t.Helper()
	ctx := context.Background()
	roles := kubernetes.NewForConfigOrDie(cfg).RbacV1().ClusterRoles()
	all, err := roles.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		role, err := roles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range all.Items {
				if r.Name != name && s.Matches(labels.Set(r.Labels)) {
					rules = append(rules, r.Rules...)
				}
			}
		}
		role.Rules = rules
		if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// answer is a call's status code and, for a Status, its message.
type answer struct {
	code    int
	message string
}

func read(t *testing.T, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
		return answer{resp.StatusCode, st.Message}
	}
	return answer{code: resp.StatusCode}
}

// asUser calls the admin API through kube-apiserver with a user's client
// certificate, as kubectl sluice does.
func (e *env) asUser(t *testing.T, user, method, path string) answer {
	t.Helper()
	cfg := restConfig(t, e.cluster.UserKubeconfig(user))
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(cfg.Host, "/")+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp)
}

func TestAdminAPIThroughKubeAPIServer(t *testing.T) {
	e := start(t)
	forbidden := func(verb, sub string) string {
		return fmt.Sprintf("forbidden: you need %s on ratelimitpolicies/%s in namespace shop", verb, sub)
	}
	// kube-apiserver refuses a call the user's RBAC in the admin group
	// does not allow, before the front sees it, with its own message.
	const byAPIServer = `in API group "admin.ratelimit.sluice.dev"`
	for _, tc := range []struct {
		name, user, method, path string
		want                     answer
		// kube-apiserver refuses some calls itself, with its own message,
		// which holds this.
		apiServer string
	}{
		{name: "a user without the role is refused", user: "nobody", method: http.MethodGet, path: keysPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "a viewer inspects", user: "viewer", method: http.MethodGet, path: keysPath, want: answer{code: 200}},
		{name: "a viewer explains", user: "viewer", method: http.MethodPost, path: explainPath, want: answer{code: 200}},
		{name: "a viewer lists bans", user: "viewer", method: http.MethodGet, path: bansPath, want: answer{code: 200}},
		{name: "a viewer lists top key values", user: "viewer", method: http.MethodGet, path: topPath, want: answer{code: 200}},
		{name: "a viewer lists overrides", user: "viewer", method: http.MethodGet, path: overridesPath, want: answer{code: 200}},
		{name: "a viewer cannot reset", user: "viewer", method: http.MethodDelete, path: keysPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "a viewer cannot lift", user: "viewer", method: http.MethodDelete, path: bansPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "a viewer cannot override", user: "viewer", method: http.MethodPut, path: overridesPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "a viewer cannot delete an override", user: "viewer", method: http.MethodDelete, path: overridesPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "sluice-admin-view alone inspects", user: "sluice-viewer", method: http.MethodGet, path: keysPath, want: answer{code: 200}},
		{name: "sluice-admin-view alone explains", user: "sluice-viewer", method: http.MethodPost, path: explainPath, want: answer{code: 200}},
		{name: "sluice-admin-view alone cannot reset", user: "sluice-viewer", method: http.MethodDelete, path: keysPath, want: answer{code: 403}, apiServer: byAPIServer},
		// The front's check stands whatever else the admin group grants.
		{name: "a viewer granted every admin call still cannot reset", user: "overgranted", method: http.MethodDelete, path: keysPath, want: answer{403, forbidden("update", "keys")}},
		{name: "a viewer granted every admin call still cannot lift", user: "overgranted", method: http.MethodDelete, path: bansPath, want: answer{403, forbidden("update", "keys")}},
		{name: "a viewer granted every admin call still cannot override", user: "overgranted", method: http.MethodPut, path: overridesPath, want: answer{403, forbidden("update", "overrides")}},
		{name: "a viewer granted every admin call still cannot delete an override", user: "overgranted", method: http.MethodDelete, path: overridesPath, want: answer{403, forbidden("update", "overrides")}},
		{name: "a viewer granted every admin call inspects", user: "overgranted", method: http.MethodGet, path: keysPath, want: answer{code: 200}},
		{name: "an editor resets", user: "editor", method: http.MethodDelete, path: keysPath, want: answer{code: 200}},
		{name: "an editor lifts", user: "editor", method: http.MethodDelete, path: bansPath, want: answer{code: 200}},
		{name: "an editor overrides", user: "editor", method: http.MethodPut, path: overridesPath, want: answer{code: 200}},
		{name: "an editor deletes an override", user: "editor", method: http.MethodDelete, path: overridesPath, want: answer{code: 200}},
		{name: "an editor explains", user: "editor", method: http.MethodPost, path: explainPath, want: answer{code: 200}},
		{name: "an admin resets", user: "owner", method: http.MethodDelete, path: keysPath, want: answer{code: 200}},
		{name: "an admin inspects", user: "owner", method: http.MethodGet, path: keysPath, want: answer{code: 200}},
		{name: "sluice-admin-edit alone resets", user: "sluice-editor", method: http.MethodDelete, path: keysPath, want: answer{code: 200}},
		{name: "sluice-admin-edit alone inspects", user: "sluice-editor", method: http.MethodGet, path: keysPath, want: answer{code: 200}},
		{name: "edit in another namespace is refused", user: "stranger", method: http.MethodDelete, path: keysPath, want: answer{code: 403}, apiServer: byAPIServer},
		{name: "edit in another namespace applies there", user: "stranger", method: http.MethodDelete, path: otherKeysPath, want: answer{code: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.asUser(t, tc.user, tc.method, tc.path)
			if tc.apiServer != "" {
				if !strings.Contains(got.message, tc.apiServer) {
					t.Errorf("%s %s as %s: %q, want kube-apiserver's refusal (%s)", tc.method, tc.path, tc.user, got.message, tc.apiServer)
				}
				got.message = ""
			}
			if got != tc.want {
				t.Errorf("%s %s as %s: %+v, want %+v", tc.method, tc.path, tc.user, got, tc.want)
			}
			calls := e.rec.take()
			path, _, _ := strings.Cut(tc.path, "?")
			if want := tc.user + " " + tc.method + " " + path; tc.want.code == 200 && (len(calls) != 1 || calls[0] != want) {
				t.Errorf("the admin API saw %q, want [%s]", calls, want)
			}
			if tc.want.code != 200 && len(calls) > 0 {
				t.Errorf("a refused call reached the admin API: %q", calls)
			}
		})
	}
	t.Run("discovery", func(t *testing.T) {
		out := e.cluster.MustKubectl("api-resources", "--api-group=admin.ratelimit.sluice.dev", "-o", "name")
		if !strings.Contains(out, "explain.admin.ratelimit.sluice.dev") {
			t.Errorf("kubectl api-resources: %q", out)
		}
		// The admin group's subresources of ratelimitpolicies take nothing
		// from the policies' own kind.
		e.cluster.MustKubectl("get", "ratelimitpolicies", "-n", "shop")
		e.cluster.MustKubectl("get", "rlp", "-n", "shop")
	})
	t.Run("kubectl auth can-i", func(t *testing.T) {
		for _, tc := range []struct {
			user string
			args []string
			want string
		}{
			// The front's check, in the policies' group.
			{"viewer", []string{"update", "ratelimitpolicies.ratelimit.sluice.dev", "--subresource=keys"}, "no"},
			{"editor", []string{"update", "ratelimitpolicies.ratelimit.sluice.dev", "--subresource=keys"}, "yes"},
			// explain, a POST that reads, is its own resource.
			{"viewer", []string{"create", "explain.admin.ratelimit.sluice.dev"}, "yes"},
			{"nobody", []string{"create", "explain.admin.ratelimit.sluice.dev"}, "no"},
		} {
			// can-i exits 1 for "no".
			out, err := e.cluster.Kubectl(append(append([]string{"auth", "can-i"}, tc.args...), "-n", "shop", "--as="+tc.user)...)
			if strings.TrimSpace(out) != tc.want {
				t.Errorf("kubectl auth can-i %s as %s: %q, want %s (%v)", strings.Join(tc.args, " "), tc.user, out, tc.want, err)
			}
		}
		// What each may do in the admin group, as `kubectl auth can-i
		// --list` (and RBAC audits) read it: the calls of its role, no more.
		// (kubectl auth can-i cannot name ratelimitpolicies/keys of the
		// admin group by itself: its discovery lists no kind for them.)
		for user, role := range map[string]admin.Role{"viewer": admin.RoleView, "sluice-viewer": admin.RoleView,
			"editor": admin.RoleEdit, "owner": admin.RoleEdit, "sluice-editor": admin.RoleEdit} {
			got := listed(t, e.cluster, user)
			want := map[string][]string{}
			for _, r := range admin.Rules(role) {
				if r.APIGroups[0] == admin.Group {
					// As kubectl writes them: ratelimitpolicies.<group>/keys.
					res, sub, _ := strings.Cut(r.Resources[0], "/")
					want[strings.TrimSuffix(res+"."+admin.Group+"/"+sub, "/")] = r.Verbs
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kubectl auth can-i --list as %s, in %s: %v, want %v", user, admin.Group, got, want)
			}
		}
	})
	t.Run("SubjectAccessReviews of every call", func(t *testing.T) { accessOfEveryCall(t, e.cluster) })
	if e.rec.leaked {
		t.Error("the admin API saw X-Remote-* headers")
	}

	// The front's own port, reached directly.
	t.Run("front proxy", func(t *testing.T) {
		otherCA := certtest.NewCA(t, "another-ca")
		for _, tc := range []struct {
			name string
			cert *certtest.Pair
			path string
			want int
		}{
			{"the front proxy's certificate", e.proxyCrt, keysPath, 200},
			{"the front proxy's certificate, no user, discovery", e.proxyCrt, base, 200},
			{"another CA", otherCA.Client(t, proxyName), keysPath, 401},
			{"a name not allowed", e.proxyCA.Client(t, "someone-else"), keysPath, 401},
			{"headers without a certificate", nil, keysPath, 401},
			{"discovery without a certificate", nil, base, 401},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if got := e.get(t, tc.cert, "editor", tc.path); got.code != tc.want {
					t.Errorf("%s: %+v, want %d", tc.path, got, tc.want)
				}
				calls := e.rec.take()
				if tc.want == 401 && len(calls) > 0 {
					t.Errorf("an unauthenticated call reached the admin API: %q", calls)
				}
			})
		}
	})

	// A CA added to the ConfigMap (a rotation's first step) is believed
	// without a restart.
	t.Run("front-proxy CA followed", func(t *testing.T) {
		rotated := certtest.NewCA(t, "rotated-ca")
		cert := rotated.Client(t, proxyName)
		if got := e.get(t, cert, "editor", keysPath); got.code != 401 {
			t.Fatalf("before the rotation: %+v, want 401", got)
		}
		ctx := context.Background()
		cms := kubernetes.NewForConfigOrDie(e.cluster.Config).CoreV1().ConfigMaps(adminauth.AuthenticationNamespace)
		cm, err := cms.Get(ctx, adminauth.AuthenticationConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["requestheader-client-ca-file"] += string(rotated.PEM)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for e.get(t, cert, "editor", keysPath).code != 200 {
			if time.Now().After(deadline) {
				t.Fatal("a certificate of the CA added to the ConfigMap is still refused")
			}
			time.Sleep(100 * time.Millisecond)
		}
		e.rec.take()
	})
}

// get calls the front directly with cert (kube-apiserver's part) as user.
func (e *env) get(t *testing.T, cert *certtest.Pair, user, path string) answer {
	t.Helper()
	tlsCfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the front's certificate is self-signed
	if cert != nil {
		tlsCfg.Certificates = []tls.Certificate{cert.TLS}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "https://"+e.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Remote-User", user)
	req.Header.Add("X-Remote-Group", "system:masters")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp)
}

// accessOfEveryCall asks the API server, for each user and each call of
// the admin API, both questions a call is decided by: may the user make
// the call in the admin group (kube-apiserver's, what `kubectl auth can-i`
// and RBAC audits answer), and may the user do what the call needs to the
// policy (the front's). Readers may make the calls that read, and nothing
// else; editors and admins every call; nobody a verb no call uses.
func accessOfEveryCall(t *testing.T, c *kubetest.Cluster) {
	reviews := kubernetes.NewForConfigOrDie(c.Config).AuthorizationV1().SubjectAccessReviews()
	const (
		adminGroup    = admin.Group
		policiesGroup = "ratelimit.sluice.dev"
	)
	type access struct{ group, verb, resource, sub string }
	reads := []access{
		{adminGroup, "create", "explain", ""},
		{adminGroup, "get", "ratelimitpolicies", "keys"},
		{adminGroup, "get", "ratelimitpolicies", "top"},
		{adminGroup, "get", "ratelimitpolicies", "bans"},
		{adminGroup, "get", "ratelimitpolicies", "overrides"},
		{policiesGroup, "get", "ratelimitpolicies", "keys"},
		{policiesGroup, "get", "ratelimitpolicies", "overrides"},
	}
	changes := []access{
		{adminGroup, "delete", "ratelimitpolicies", "keys"},
		{adminGroup, "delete", "ratelimitpolicies", "bans"},
		{adminGroup, "update", "ratelimitpolicies", "overrides"},
		{adminGroup, "delete", "ratelimitpolicies", "overrides"},
		{policiesGroup, "update", "ratelimitpolicies", "keys"},
		{policiesGroup, "update", "ratelimitpolicies", "overrides"},
	}
	unused := []access{
		{adminGroup, "create", "ratelimitpolicies", "keys"},
		{adminGroup, "update", "ratelimitpolicies", "keys"},
		{adminGroup, "update", "ratelimitpolicies", "bans"},
		{adminGroup, "create", "ratelimitpolicies", "overrides"},
		{adminGroup, "delete", "ratelimitpolicies", "top"},
		{adminGroup, "get", "explain", ""},
		{adminGroup, "list", "ratelimitpolicies", ""},
		{policiesGroup, "delete", "ratelimitpolicies", "keys"},
	}
	for user, mayChange := range map[string]bool{"viewer": false, "sluice-viewer": false, "editor": true, "owner": true, "sluice-editor": true} {
		for _, set := range []struct {
			accesses []access
			want     bool
		}{{reads, true}, {changes, mayChange}, {unused, false}} {
			for _, a := range set.accesses {
				review, err := reviews.Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: []string{"system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "shop", Name: "per-tenant",
						Group: a.group, Verb: a.verb, Resource: a.resource, Subresource: a.sub},
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if review.Status.Allowed != set.want {
					t.Errorf("may %s %s %s/%s in %s: %v, want %v", user, a.verb, a.resource, a.sub, a.group, review.Status.Allowed, set.want)
				}
			}
		}
	}
}

// listed is what `kubectl auth can-i --list` says user may do in the admin
// group in shop: verbs by resource, sorted.
func listed(t *testing.T, c *kubetest.Cluster, user string) map[string][]string {
	t.Helper()
	out := c.MustKubectl("auth", "can-i", "--list", "-n", "shop", "--as="+user)
	got := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.Contains(fields[0], "."+admin.Group) {
			continue
		}
		// Resources, Non-Resource URLs, Resource Names, then "[verb verb]".
		for _, v := range strings.Fields(strings.Trim(strings.Join(fields[3:], " "), "[]")) {
			if !slices.Contains(got[fields[0]], v) {
				got[fields[0]] = append(got[fields[0]], v)
			}
		}
		slices.Sort(got[fields[0]])
	}
	return got
}
