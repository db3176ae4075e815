// Package config tests the kustomize manifests: every kustomization
// renders, config/default holds together (selectors, ports, probes,
// security settings, the Redis Secrets), and a real API server accepts all
// of it with `kubectl apply` (for real on an empty cluster, then as a
// server-side dry run), the samples and the integration examples included.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

const (
	namespace = "sluice-system"
	image     = "ghcr.io/sluice-dev/sluice:latest"
)

// absentCRDs are the kinds whose CRDs a bare API server lacks, with the
// files allowed to hold them. config/default holds none of them.
var absentCRDs = map[string]string{
	"monitoring.coreos.com/ServiceMonitor":      "the Prometheus Operator's (config/prometheus, an optional component)",
	"monitoring.coreos.com/PrometheusRule":      "the Prometheus Operator's (config/prometheus, an optional component)",
	"traefik.io/Middleware":                     "Traefik's (config/examples/traefik)",
	"kustomize.toolkit.fluxcd.io/Kustomization": "Flux's (config/gitops/flux)",
}

func groupKind(u *unstructured.Unstructured) string {
	return u.GroupVersionKind().GroupKind().String()
}

func kindKey(u *unstructured.Unstructured) string {
	gk := u.GroupVersionKind().GroupKind()
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Group + "/" + gk.Kind
}

// decode splits a multi-document YAML stream into objects.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decode: %v", err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// encode joins objects into one YAML stream.
func encode(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes()
}

func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	// kubectl reads the files; make them inputs of the cached test result.
	kubetest.TrackFiles(t, ".")
	out, err := kubetest.Kustomize(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// kustomizations lists the directories under config/ with a
// kustomization.yaml, split into Kustomizations and Components.
func kustomizations(t *testing.T) (kustomizations, components []string) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return err
		}
		dir := filepath.Dir(path)
		switch k.Kind {
		case "Kustomization", "":
			kustomizations = append(kustomizations, dir)
		case "Component":
			components = append(components, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return kustomizations, components
}

func TestEveryKustomizationRenders(t *testing.T) {
	dirs, components := kustomizations(t)
	for _, want := range []string{"default", "crd", "rbac", "manager", "redis", "network-policy", "samples", "examples/overlay"} {
		if !slices.Contains(dirs, filepath.FromSlash(want)) {
			t.Errorf("config/%s/kustomization.yaml is missing", want)
		}
	}
	for _, dir := range dirs {
		t.Run(filepath.ToSlash(dir), func(t *testing.T) {
			if objs := render(t, dir); len(objs) == 0 {
				t.Errorf("%s renders nothing", dir)
			}
		})
	}
	// Components render only inside a Kustomization: the example overlay
	// uses every one of them.
	overlay, err := os.ReadFile(filepath.Join("examples", "overlay", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range components {
		if !strings.Contains(string(overlay), "../../"+filepath.ToSlash(c)) {
			t.Errorf("component config/%s is not used by config/examples/overlay, so no test renders it", c)
		}
	}
}

// The image is named in one place, config/manager's `images:`.
func TestImageNamedOnce(t *testing.T) {
	var places []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "examples"+string(filepath.Separator)) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "ghcr.io/sluice-dev/sluice") {
			places = append(places, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join("manager", "kustomization.yaml")}; !slices.Equal(places, want) {
		t.Errorf("the image is named in %v, want only %v", places, want)
	}
}

// manifests is a rendered kustomization, typed where it matters.
type manifests struct {
	all          []*unstructured.Unstructured
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	secrets      map[string]*corev1.Secret
	accounts     map[string]*corev1.ServiceAccount
	bindings     []*rbacv1.ClusterRoleBinding
	roleBindings []*rbacv1.RoleBinding
	clusterRoles map[string]*rbacv1.ClusterRole
	monitors     []*unstructured.Unstructured
}

// outsideNamespace are the objects of config/default that live outside
// its namespace, with theirs: the RoleBinding that lets the controller
// read kube-apiserver's front-proxy ConfigMap, where that ConfigMap is.
var outsideNamespace = map[string]string{
	"rbac.authorization.k8s.io/RoleBinding sluice-controller:extension-apiserver-authentication-reader": "kube-system",
}

// kubernetesRoles are Kubernetes' own ClusterRoles that config/default
// binds (rbac_test.go says why).
var kubernetesRoles = map[string]bool{"system:auth-delegator": true}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func load(t *testing.T, dir string) *manifests {
	t.Helper()
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, netpols: map[string]*networkingv1.NetworkPolicy{},
		secrets: map[string]*corev1.Secret{}, accounts: map[string]*corev1.ServiceAccount{},
		clusterRoles: map[string]*rbacv1.ClusterRole{},
	}
	m.all = render(t, dir)
	for _, u := range m.all {
		switch groupKind(u) {
		case "Deployment.apps":
			m.deployments[u.GetName()] = typed[appsv1.Deployment](t, u)
		case "Service":
			m.services[u.GetName()] = typed[corev1.Service](t, u)
		case "PodDisruptionBudget.policy":
			m.pdbs[u.GetName()] = typed[policyv1.PodDisruptionBudget](t, u)
		case "NetworkPolicy.networking.k8s.io":
			m.netpols[u.GetName()] = typed[networkingv1.NetworkPolicy](t, u)
		case "Secret":
			m.secrets[u.GetName()] = typed[corev1.Secret](t, u)
		case "ServiceAccount":
			m.accounts[u.GetName()] = typed[corev1.ServiceAccount](t, u)
		case "ClusterRoleBinding.rbac.authorization.k8s.io":
			m.bindings = append(m.bindings, typed[rbacv1.ClusterRoleBinding](t, u))
		case "RoleBinding.rbac.authorization.k8s.io":
			m.roleBindings = append(m.roleBindings, typed[rbacv1.RoleBinding](t, u))
		case "ClusterRole.rbac.authorization.k8s.io":
			m.clusterRoles[u.GetName()] = typed[rbacv1.ClusterRole](t, u)
		case "ServiceMonitor.monitoring.coreos.com":
			m.monitors = append(m.monitors, u)
		}
	}
	return m
}

// podsOf is the Deployment whose pods the selector selects (exactly one).
func (m *manifests) podsOf(t *testing.T, what string, sel labels.Selector) *appsv1.Deployment {
	t.Helper()
	var found []*appsv1.Deployment
	for _, d := range m.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s selects the pods of %d Deployments, want 1", what, len(found))
	}
	return found[0]
}

func containerPort(d *appsv1.Deployment, name string) (int32, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestDefaultHoldsTogether(t *testing.T) {
	m := load(t, "default")

	for _, u := range m.all {
		if reason, ok := absentCRDs[kindKey(u)]; ok {
			t.Errorf("config/default holds a %s: its CRD is %s, so `kubectl apply -k config/default` would fail without it", kindKey(u), reason)
		}
		if u.GetNamespace() != "" && u.GetNamespace() != namespace && outsideNamespace[kindKey(u)+" "+u.GetName()] != u.GetNamespace() {
			t.Errorf("%s %s is in namespace %q, want %s", u.GetKind(), u.GetName(), u.GetNamespace(), namespace)
		}
	}
	for _, want := range []string{"Namespace", "CustomResourceDefinition.apiextensions.k8s.io"} {
		if !slices.ContainsFunc(m.all, func(u *unstructured.Unstructured) bool { return groupKind(u) == want }) {
			t.Errorf("config/default has no %s", want)
		}
	}

	ctrlDep, check := m.deployments["sluice-controller"], m.deployments["sluice-check"]
	if ctrlDep == nil || check == nil {
		t.Fatalf("want Deployments sluice-controller and sluice-check, have %v", slices.Sorted(maps.Keys(m.deployments)))
	}

	// Each Deployment logs in to Redis as its own ACL user (redis/users.acl),
	// from a Secret of its own.
	aclUsers := aclUserNames(t)
	for dep, name := range redisSecrets {
		s := m.secrets[name]
		if s == nil {
			t.Errorf("no Secret %s (how %s reaches Redis)", name, dep)
			continue
		}
		for _, key := range []string{"url", "username", "password"} {
			if _, ok := s.StringData[key]; !ok {
				t.Errorf("Secret %s has no %q key", name, key)
			}
		}
		if u := s.StringData["username"]; u != redisUsers[dep] || !slices.Contains(aclUsers, u) {
			t.Errorf("Secret %s: username %q, want %q, a user of redis/users.acl (%v)", name, u, redisUsers[dep], aclUsers)
		}
	}
	if m.secrets["sluice-redis"] != nil {
		t.Errorf("a shared Secret sluice-redis: each Deployment has its own Redis user and Secret")
	}

	for name, d := range m.deployments {
		t.Run(name, func(t *testing.T) {
			spec := d.Spec.Template.Spec
			secret := redisSecrets[name]
			if secret == "" {
				t.Fatalf("no Redis Secret known for Deployment %s", name)
			}
			sel, err := metaSelector(d.Spec.Selector.MatchLabels)
			if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("the selector does not select the pod template's labels")
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
				t.Errorf("replicas = %v, want at least 2", d.Spec.Replicas)
			}
			if _, ok := m.accounts[spec.ServiceAccountName]; !ok {
				t.Errorf("serviceAccountName %q is not among the manifests", spec.ServiceAccountName)
			}
			psc := spec.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext must set runAsNonRoot and seccompProfile RuntimeDefault")
			}
			if spec.Affinity == nil && len(spec.TopologySpreadConstraints) == 0 {
				t.Errorf("no anti-affinity or topology spread: both replicas may land on one node")
			}
			mounts := map[string]string{}
			for _, v := range spec.Volumes {
				if v.Secret == nil {
					continue
				}
				if v.Secret.SecretName == secret {
					mounts[v.Name] = ""
				} else if strings.HasPrefix(v.Secret.SecretName, "sluice-redis") {
					t.Errorf("volume %s mounts Secret %s, another process's Redis credentials", v.Name, v.Secret.SecretName)
				}
			}
			for _, c := range spec.Containers {
				if c.Image != image {
					t.Errorf("container %s: image %q, want %q", c.Name, c.Image, image)
				}
				sc := c.SecurityContext
				if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
					sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("container %s: want readOnlyRootFilesystem, no privilege escalation, capabilities drop ALL", c.Name)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("container %s: want cpu and memory requests and a memory limit", c.Name)
				}
				for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if p == nil || p.HTTPGet == nil {
						t.Errorf("container %s: no HTTP %s probe", c.Name, what)
						continue
					}
					if _, ok := containerPort(d, p.HTTPGet.Port.String()); !ok {
						t.Errorf("container %s: %s probe port %q is not a named container port", c.Name, what, p.HTTPGet.Port.String())
					}
				}
				for env, key := range map[string]string{"SLUICE_REDIS_URL": "url", "SLUICE_REDIS_USERNAME": "username"} {
					if e, ok := envValue(c, env); !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
						e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
						t.Errorf("container %s: %s must come from Secret %s, key %s", c.Name, env, secret, key)
					}
				}
				for _, fileEnv := range []string{"SLUICE_REDIS_PASSWORD_FILE", "SLUICE_REDIS_CA_FILE"} {
					e, ok := envValue(c, fileEnv)
					if !ok {
						if fileEnv == "SLUICE_REDIS_PASSWORD_FILE" {
							t.Errorf("container %s: no %s", c.Name, fileEnv)
						}
						continue
					}
					mounted := false
					for _, vm := range c.VolumeMounts {
						if _, ok := mounts[vm.Name]; ok && strings.HasPrefix(e.Value, vm.MountPath+"/") {
							mounted = true
						}
					}
					if !mounted {
						t.Errorf("container %s: %s=%s is not inside the mounted Secret %s", c.Name, fileEnv, e.Value, secret)
					}
				}
			}
		})
	}

	t.Run("controller", func(t *testing.T) {
		c := ctrlDep.Spec.Template.Spec.Containers[0]
		// Leader election is off unless asked for; two replicas need it.
		for _, arg := range []string{"controller", "--leader-elect=true", "--leader-election-namespace=$(POD_NAMESPACE)", "--metrics-bind-address=:8081", "--health-probe-bind-address=:8082"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("args %v lack %s", c.Args, arg)
			}
		}
		if e, ok := envValue(c, "POD_NAMESPACE"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("POD_NAMESPACE must come from the downward API (metadata.namespace)")
		}
		if p, _ := containerPort(ctrlDep, "probes"); p != 8082 {
			t.Errorf("probes port = %d, want 8082", p)
		}
		if p, _ := containerPort(ctrlDep, "metrics"); p != 8081 {
			t.Errorf("metrics port = %d, want 8081", p)
		}
		if c.Resources.Limits.Cpu().IsZero() {
			t.Errorf("want a CPU limit on the controller")
		}
		// The ClusterRoleBinding gives the generated role to this
		// Deployment's ServiceAccount.
		bound := false
		for _, b := range m.bindings {
			if _, ok := m.clusterRoles[b.RoleRef.Name]; (!ok && !kubernetesRoles[b.RoleRef.Name]) || b.RoleRef.Kind != "ClusterRole" {
				t.Errorf("ClusterRoleBinding %s refers to ClusterRole %q, not among the manifests", b.Name, b.RoleRef.Name)
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == ctrlDep.Spec.Template.Spec.ServiceAccountName && s.Namespace == namespace {
					bound = bound || b.RoleRef.Name == "sluice-controller"
				}
			}
		}
		if !bound {
			t.Errorf("no ClusterRoleBinding of ClusterRole sluice-controller to ServiceAccount %s/%s", namespace, ctrlDep.Spec.Template.Spec.ServiceAccountName)
		}
	})

	t.Run("check", func(t *testing.T) {
		spec := check.Spec.Template.Spec
		c := spec.Containers[0]
		if c.Args[0] != "check" || !slices.Contains(c.Args, "--listen=:8080") {
			t.Errorf("args = %v, want check --listen=:8080", c.Args)
		}
		if p, _ := containerPort(check, "http"); p != 8080 {
			t.Errorf("http port = %d, want 8080", p)
		}
		if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("probes: readiness %s, liveness %s; want /readyz, /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("the check endpoint needs no Kubernetes access: automountServiceAccountToken must be false")
		}
		for _, b := range m.bindings {
			for _, s := range b.Subjects {
				if s.Name == spec.ServiceAccountName {
					t.Errorf("ClusterRoleBinding %s grants the check endpoint's ServiceAccount access", b.Name)
				}
			}
		}
		for _, b := range m.roleBindings {
			for _, s := range b.Subjects {
				if s.Name == spec.ServiceAccountName {
					t.Errorf("RoleBinding %s/%s grants the check endpoint's ServiceAccount access", b.Namespace, b.Name)
				}
			}
		}
	})

	t.Run("services", func(t *testing.T) {
		if m.services["sluice-check"] == nil {
			t.Fatal("no Service sluice-check (the name the proxy examples use)")
		}
		for name, s := range m.services {
			if s.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("Service %s: type %s; Sluice's Services must stay ClusterIP", name, s.Spec.Type)
			}
			d := m.podsOf(t, "Service "+name, labels.SelectorFromSet(s.Spec.Selector))
			for _, p := range s.Spec.Ports {
				if _, ok := containerPort(d, p.TargetPort.String()); !ok {
					t.Errorf("Service %s: targetPort %q is not a named port of %s", name, p.TargetPort.String(), d.Name)
				}
			}
		}
		if got := m.services["sluice-check"].Spec.Ports[0].Port; got != 8080 {
			t.Errorf("Service sluice-check port = %d, want 8080 (the examples call :8080)", got)
		}
	})

	t.Run("disruption budgets", func(t *testing.T) {
		pdb := m.pdbs["sluice-check"]
		if pdb == nil {
			t.Fatal("no PodDisruptionBudget sluice-check")
		}
		for name, p := range m.pdbs {
			sel, err := metaSelector(p.Spec.Selector.MatchLabels)
			if err != nil {
				t.Fatal(err)
			}
			m.podsOf(t, "PodDisruptionBudget "+name, sel)
		}
		if m.podsOf(t, "PodDisruptionBudget sluice-check", labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels)) != check {
			t.Errorf("PodDisruptionBudget sluice-check does not cover the check pods")
		}
	})

	t.Run("network policy", func(t *testing.T) {
		np := m.netpols["sluice-check"]
		if np == nil {
			t.Fatal("no NetworkPolicy sluice-check")
		}
		if m.podsOf(t, "NetworkPolicy sluice-check", labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)) != check {
			t.Fatalf("NetworkPolicy sluice-check does not select the check pods")
		}
		if len(np.Spec.Ingress) == 0 {
			t.Fatal("no ingress rules: the check endpoint would take no traffic")
		}
		first := np.Spec.Ingress[0]
		if len(first.From) != 1 || first.From[0].NamespaceSelector == nil ||
			first.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" || first.From[0].PodSelector != nil {
			t.Errorf("the first rule must admit the ingress controller's namespace by kubernetes.io/metadata.name (ingress-nginx by default)")
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				t.Errorf("a rule without `from` admits everyone")
			}
			for _, p := range rule.Ports {
				if _, ok := containerPort(check, p.Port.String()); !ok {
					t.Errorf("port %q is not a named port of the check pods", p.Port.String())
				}
			}
		}
	})
}

// redisSecrets is each Deployment's Redis Secret, redisUsers the Redis ACL
// user it logs in as.
var (
	redisSecrets = map[string]string{"sluice-controller": "sluice-redis-controller", "sluice-check": "sluice-redis-check"}
	redisUsers   = map[string]string{"sluice-controller": "sluice-controller", "sluice-check": "sluice-check"}
)

// aclUserNames are the users redis/users.acl defines. Redis reads ACL files
// without comments: every line that is not blank is a user.
func aclUserNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("redis", "users.acl"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 || fields[0] != "user" {
			t.Errorf("redis/users.acl:%d: want `user <name> <rules>` (Redis reads no comments there): %q", i+1, line)
			continue
		}
		names = append(names, fields[1])
	}
	return names
}

func metaSelector(ml map[string]string) (labels.Selector, error) {
	if len(ml) == 0 {
		return nil, errors.New("empty selector")
	}
	return labels.SelectorFromSet(ml), nil
}

// The example overlay uses both components: ServiceMonitors that find the
// metrics Services, and the CA file inside the mounted Secret.
func TestComponents(t *testing.T) {
	m := load(t, filepath.Join("examples", "overlay"))
	if len(m.monitors) != 2 {
		t.Fatalf("want 2 ServiceMonitors (check, controller), got %d", len(m.monitors))
	}
	for _, mon := range m.monitors {
		ml, _, _ := unstructured.NestedStringMap(mon.Object, "spec", "selector", "matchLabels")
		endpoints, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
		var svc *corev1.Service
		for _, s := range m.services {
			if labels.SelectorFromSet(ml).Matches(labels.Set(s.Labels)) {
				if svc != nil {
					t.Errorf("ServiceMonitor %s selects more than one Service", mon.GetName())
				}
				svc = s
			}
		}
		if svc == nil {
			t.Errorf("ServiceMonitor %s selects no Service", mon.GetName())
			continue
		}
		for _, e := range endpoints {
			port, _ := e.(map[string]any)["port"].(string)
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
				t.Errorf("ServiceMonitor %s: Service %s has no port named %q", mon.GetName(), svc.Name, port)
			}
		}
	}
	for name, d := range m.deployments {
		if _, ok := envValue(d.Spec.Template.Spec.Containers[0], "SLUICE_REDIS_CA_FILE"); !ok {
			t.Errorf("Deployment %s: the redis-tls component did not set SLUICE_REDIS_CA_FILE", name)
		}
	}
	if got := *m.deployments["sluice-check"].Spec.Replicas; got != 3 {
		t.Errorf("overlay patch: check replicas = %d, want 3", got)
	}
	np := m.netpols["sluice-check"]
	if got := np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != "traefik" {
		t.Errorf("overlay patch: ingress namespace = %q, want traefik", got)
	}
}

// applyDryRun applies objects server-side in dry-run mode, leaving out the
// kinds whose CRDs the API server lacks.
func applyDryRun(t *testing.T, c *kubetest.Cluster, what string, objs []*unstructured.Unstructured) {
	t.Helper()
	var keep []*unstructured.Unstructured
	for _, o := range objs {
		if reason, ok := absentCRDs[kindKey(o)]; ok {
			t.Logf("%s: leaving out %s %s: its CRD is %s", what, kindKey(o), o.GetName(), reason)
			continue
		}
		keep = append(keep, o)
	}
	if len(keep) == 0 {
		t.Fatalf("%s: nothing to apply", what)
	}
	out, err := c.KubectlStdin(encode(t, keep), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s:\n%s", what, out)
}

func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

func TestAppliesToAPIServer(t *testing.T) {
	kubetest.TrackFiles(t, ".")
	c := kubetest.Start(t, kubetest.Options{})

	// An empty cluster: the install command as the README gives it.
	out, err := c.Kubectl("apply", "-k", "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -k config/default:\n%s", out)
	c.MustKubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/ratelimitpolicies.ratelimit.sluice.dev", "crd/ratelimitoverrides.ratelimit.sluice.dev")

	// Applying again validates everything against what is now installed.
	out, err = c.Kubectl("apply", "--dry-run=server", "-k", "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply --dry-run=server -k config/default:\n%s", out)

	for _, ns := range []string{"shop", "argocd", "flux-system", "ingress-nginx"} {
		c.MustKubectl("create", "namespace", ns)
	}
	out, err = c.Kubectl("apply", "--dry-run=server", "-n", "default", "-k", "samples")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply --dry-run=server -k config/samples:\n%s", out)
	if n := strings.Count(out, "ratelimitpolicy.ratelimit.sluice.dev/"); n < 6 {
		t.Errorf("%d samples applied, want one per algorithm at least (6)", n)
	}

	applyDryRun(t, c, "config/examples/overlay", render(t, filepath.Join("examples", "overlay")))
	for _, file := range []string{
		"examples/ingress-nginx/ingress.yaml",
		"examples/ingress-nginx/ingress-429.yaml",
		"examples/ingress-nginx/controller-configmap.yaml",
		"examples/traefik/middleware.yaml",
		"gitops/argocd/argocd-cm.yaml",
	} {
		applyDryRun(t, c, "config/"+file, readObjects(t, filepath.FromSlash(file)))
	}
	// Flux's Kustomization CRD is not here: check the file parses.
	if objs := readObjects(t, filepath.Join("gitops", "flux", "kustomizations.yaml")); len(objs) != 2 {
		t.Errorf("gitops/flux/kustomizations.yaml: %d objects, want 2", len(objs))
	}
}

// Every algorithm has a sample.
func TestSamplesCoverEveryAlgorithm(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range render(t, "samples") {
		limits, _, _ := unstructured.NestedSlice(o.Object, "spec", "limits")
		for _, l := range limits {
			for k := range l.(map[string]any) {
				seen[k] = true
			}
		}
	}
	for _, alg := range []string{"tokenBucket", "fixedWindow", "slidingWindowLog", "slidingWindowCounter", "leakyBucket", "gcra", "calendar", "concurrency"} {
		if !seen[alg] {
			t.Errorf("no sample uses %s", alg)
		}
	}
}

// The proxy configurations that are not Kubernetes objects parse with the
// tools that read them.
func TestProxyExamplesParse(t *testing.T) {
	t.Run("caddy", func(t *testing.T) {
		caddy, err := exec.LookPath("caddy")
		if err != nil {
			t.Fatal("caddy is not on PATH: run `make test` (it installs the test packages) or `apt-get install caddy`")
		}
		out, err := exec.Command(caddy, "adapt", "--config", filepath.Join("examples", "caddy", "Caddyfile"), "--adapter", "caddyfile").CombinedOutput()
		if err != nil {
			t.Fatalf("caddy adapt: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `"uri":"/check/shop"`) {
			t.Errorf("the adapted Caddyfile does not call /check/shop:\n%s", out)
		}
	})
	t.Run("envoy", func(t *testing.T) {
		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join("examples", "envoy", "envoy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "path_prefix: /envoy/shop") {
			t.Errorf("envoy.yaml: the ext_authz http_service needs path_prefix /envoy/<namespace>")
		}
	})
	t.Run("envoy grpc", func(t *testing.T) {
		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join("examples", "envoy", "envoy-grpc.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
			t.Fatal(err)
		}
		// The check's namespace comes from the route, and gRPC needs
		// HTTP/2 to the cluster the filter names.
		for _, want := range []string{
			"context_extensions: {namespace: shop}",
			"cluster_name: sluice-check-grpc",
			"explicit_http_config: {http2_protocol_options: {}}",
			"failure_mode_allow: false",
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("envoy-grpc.yaml lacks %q", want)
			}
		}
	})
	// test/e2e runs the file provider's form in Traefik; it stands for the
	// CRD only while both say the same.
	t.Run("traefik file provider and CRD agree", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join("examples", "traefik", "dynamic.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			HTTP struct {
				Middlewares map[string]struct {
					ForwardAuth map[string]any `json:"forwardAuth"`
				} `json:"middlewares"`
				Routers map[string]struct {
					Rule        string   `json:"rule"`
					EntryPoints []string `json:"entryPoints"`
					Middlewares []string `json:"middlewares"`
					Service     string   `json:"service"`
				} `json:"routers"`
				Services map[string]any `json:"services"`
			} `json:"http"`
		}
		if err := yaml.UnmarshalStrict(b, &file); err != nil {
			t.Fatalf("traefik/dynamic.yaml: %v", err)
		}
		var crd, ingress *unstructured.Unstructured
		for _, o := range readObjects(t, filepath.Join("examples", "traefik", "middleware.yaml")) {
			switch o.GetKind() {
			case "Middleware":
				crd = o
			case "Ingress":
				ingress = o
			}
		}
		if crd == nil || ingress == nil {
			t.Fatal("traefik/middleware.yaml: want a Middleware and an Ingress")
		}
		want, _, _ := unstructured.NestedMap(crd.Object, "spec", "forwardAuth")
		got := file.HTTP.Middlewares[crd.GetName()].ForwardAuth
		if !equalJSON(t, got, want) {
			t.Errorf("dynamic.yaml http.middlewares.%s.forwardAuth = %v, want the CRD's spec.forwardAuth %v", crd.GetName(), got, want)
		}
		rules, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "rules")
		if len(rules) != 1 {
			t.Fatalf("traefik/middleware.yaml: the Ingress has %d rules, want 1", len(rules))
		}
		host, _, _ := unstructured.NestedString(rules[0].(map[string]any), "host")
		if len(file.HTTP.Routers) != 1 {
			t.Fatalf("dynamic.yaml: %d routers, want 1", len(file.HTTP.Routers))
		}
		for name, r := range file.HTTP.Routers {
			if r.Rule != "Host(`"+host+"`)" {
				t.Errorf("dynamic.yaml router %s: rule %q, want the Ingress's host %q", name, r.Rule, host)
			}
			if !slices.Equal(r.Middlewares, []string{crd.GetName()}) {
				t.Errorf("dynamic.yaml router %s: middlewares %v, want [%s]", name, r.Middlewares, crd.GetName())
			}
			if _, ok := file.HTTP.Services[r.Service]; !ok {
				t.Errorf("dynamic.yaml router %s: service %q is not defined", name, r.Service)
			}
		}
	})
}

// equalJSON reports whether a and b are the same once encoded as JSON.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// TestRateLimitExamplesStripOverLimit: every example that puts Envoy's
// rate limit filter in a chain removes a client's X-Sluice-Over-Limit
// before it (docs/concepts/modes.md: the application can trust the
// header), since Envoy adds the answer's request_headers_to_add beside a
// header of the same name.
func TestRateLimitExamplesStripOverLimit(t *testing.T) {
	for _, file := range []string{
		"envoy/envoy-ratelimit.yaml", "envoy/envoy-llm.yaml", "envoy/envoy-concurrency.yaml",
		"gateway-api/istio-ratelimit.yaml",
	} {
		b, err := os.ReadFile(filepath.Join("examples", file))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		strip := strings.Index(s, "- remove: x-sluice-over-limit")
		filter := strings.Index(s, "name: envoy.filters.http.ratelimit")
		if filter < 0 || strip < 0 || strip > filter {
			t.Errorf("%s: no header_mutation removing x-sluice-over-limit before the rate limit filter", file)
		}
	}
}
