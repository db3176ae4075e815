package release

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The Helm chart, charts/sluice: linted, rendered for its defaults and for
// a values file that sets everything, compared with config/default,
// applied to a real API server, installed, upgraded and uninstalled with
// helm, and refused by its schema when a value is wrong.

const releaseNamespace = "sluice-system"

// helmLabels are the labels Helm's conventions add to every object, which
// config/default does not have.
var helmLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

func chartDir(t testing.TB) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	kubetest.TrackFiles(t, filepath.Join(root, "charts"), filepath.Join(root, "config"), filepath.Join(root, "test", "release", "testdata"))
	return filepath.Join(root, "charts", "sluice")
}

// helmTemplate renders the chart as `helm install -n sluice-system` would.
func helmTemplate(t testing.TB, args ...string) []byte {
	t.Helper()
	out := run(t, "", nil, 2*time.Minute, tool(t, "helm"),
		append([]string{"template", "sluice", chartDir(t), "--namespace", releaseNamespace}, args...)...)
	return []byte(out)
}

func testdata(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(kubetest.RepoRoot(t), "test", "release", "testdata", name)
}

func TestChartLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, args := range [][]string{nil, {"--values", testdata(t, "values-full.yaml")}} {
		out := run(t, "", nil, 2*time.Minute, helm, append([]string{"lint", "--strict", chartDir(t)}, args...)...)
		t.Logf("helm lint --strict %v:\n%s", args, out)
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") || strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm lint %v is not clean:\n%s", args, out)
		}
	}
}

// byKey indexes objects by apiVersion, kind, namespace and name.
func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[key(o)] = o
	}
	return out
}

// withoutHelm is a chart object less what Helm's conventions add: its
// labels, and the CRD's keep policy (checked here).
func withoutHelm(t testing.TB, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	o = o.DeepCopy()
	labels := o.GetLabels()
	for _, l := range helmLabels {
		if _, ok := labels[l]; !ok {
			t.Errorf("chart: %s lacks the label %s", key(o), l)
		}
		delete(labels, l)
	}
	o.SetLabels(labels)
	if ann := o.GetAnnotations(); ann != nil {
		if o.GetKind() == "CustomResourceDefinition" && ann["helm.sh/resource-policy"] != "keep" {
			t.Errorf("chart: the CRD is not kept on uninstall: annotations %v", ann)
		}
		delete(ann, "helm.sh/resource-policy")
		if len(ann) == 0 {
			ann = nil
		}
		o.SetAnnotations(ann)
	}
	return o
}

// diff lists where two decoded objects differ, by path.
func diff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		var out []string
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			out = append(out, diff(path+"."+k, w[k], g[k])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		var out []string
		for i := range w {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	return []string{fmt.Sprintf("%s: kustomize %s, chart %s", path, wb, gb)}
}

// compare checks that the chart renders the kustomization's objects, less
// the Namespace (Helm's release namespace, made by --create-namespace) and
// Helm's labels; it returns the keys compared.
func compare(t *testing.T, kustomized, charted []byte) []string {
	t.Helper()
	want, got := byKey(decode(t, kustomized)), byKey(decode(t, charted))
	var keys []string
	for k, w := range want {
		if w.GetKind() == "Namespace" {
			if _, ok := got[k]; ok {
				t.Errorf("chart renders %s: Helm's release namespace is made by `helm install --create-namespace`", k)
			}
			continue
		}
		g, ok := got[k]
		if !ok {
			t.Errorf("chart lacks %s, which kustomize renders", k)
			continue
		}
		keys = append(keys, k)
		for _, d := range diff("", w.Object, withoutHelm(t, g).Object) {
			t.Errorf("%s%s", k, d)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("chart renders %s, which kustomize does not", k)
		}
	}
	sort.Strings(keys)
	return keys
}

// With its defaults the chart installs what `kubectl apply -k
// config/default` installs, field for field. The only differences: no
// Namespace object (helm install --namespace sluice-system
// --create-namespace makes it, and the README says to label it for Pod
// Security "restricted"), Helm's four labels on every object, and the
// CRD's helm.sh/resource-policy: keep.
func TestChartMatchesKustomize(t *testing.T) {
	root := kubetest.RepoRoot(t)
	kustomized, err := kubetest.Kustomize(t, filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	keys := compare(t, kustomized, helmTemplate(t))
	t.Logf("the same %d objects: %s", len(keys), strings.Join(keys, ", "))

	// The optional parts: serviceMonitor, prometheusRule and
	// grafanaDashboard enabled are config/prometheus,
	// redis.tls.caFromSecret is config/redis-tls, in an overlay that gives
	// the components' objects config/default's namespace and label
	// (config/default's own reach only its resources).
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "config"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
transformers:
- |-
  apiVersion: builtin
  kind: NamespaceTransformer
  metadata:
    name: sluice
    namespace: sluice-system
  unsetOnly: true
labels:
- pairs:
    app.kubernetes.io/part-of: sluice
  includeSelectors: false
resources:
- %[1]s/default
components:
- %[1]s/prometheus
- %[1]s/redis-tls
`, filepath.ToSlash(rel))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	kustomized, err = kubetest.Kustomize(t, overlay)
	if err != nil {
		t.Fatal(err)
	}
	keys = compare(t, kustomized, helmTemplate(t, "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "grafanaDashboard.enabled=true", "--set", "redis.tls.caFromSecret=true"))
	for _, k := range []string{"monitoring.coreos.com/v1/ServiceMonitor sluice-system/sluice-check",
		"monitoring.coreos.com/v1/PrometheusRule sluice-system/sluice", "v1/ConfigMap sluice-system/sluice-grafana-dashboard"} {
		if !slices.Contains(keys, k) {
			t.Errorf("%s was not compared: %v", k, keys)
		}
	}
}

// applyServerSide applies objects with server-side apply as field manager
// helm-template (leaving out kinds whose CRDs envtest lacks) and returns
// kubectl's output.
func applyServerSide(t *testing.T, c *kubetest.Cluster, objs []*unstructured.Unstructured) string {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		if o.GroupVersionKind().Group == "monitoring.coreos.com" {
			t.Logf("leaving out %s: the Prometheus Operator's CRD is not installed here", key(o))
			continue
		}
		j, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteString("\n")
	}
	out, err := c.KubectlStdin([]byte(b.String()), "apply", "--server-side", "--field-manager=helm-template", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// restrictedNamespace creates the release namespace as the README says:
// Pod Security "restricted" enforced, so the API server warns about any
// workload that would not run there.
func restrictedNamespace(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	c.MustKubectl("create", "namespace", releaseNamespace)
	c.MustKubectl("label", "namespace", releaseNamespace, "pod-security.kubernetes.io/enforce=restricted")
}

func get[T any](t *testing.T, c *kubetest.Cluster, kind, name string) *T {
	t.Helper()
	out := c.MustKubectl("get", "-n", releaseNamespace, kind, name, "-o", "json")
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(out), &u.Object); err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The chart's output for its defaults and for values-full.yaml, applied
// with server-side apply to a real API server (twice: the second apply
// changes nothing), with what the API server stored read back.
func TestChartAppliesToAPIServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		verify func(t *testing.T, c *kubetest.Cluster)
	}{
		{"default values", nil, verifyDefaults},
		{"values-full.yaml", []string{"--values", testdata(t, "values-full.yaml")}, verifyFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := decode(t, helmTemplate(t, tc.args...))
			c := kubetest.Start(t, kubetest.Options{})
			restrictedNamespace(t, c)
			out := applyServerSide(t, c, objs)
			t.Logf("kubectl apply --server-side:\n%s", out)
			if strings.Contains(out, "Warning") {
				t.Errorf("the API server warned (Pod Security \"restricted\"?):\n%s", out)
			}
			out = applyServerSide(t, c, objs)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasSuffix(line, " serverside-applied") {
					t.Errorf("second apply: %q", line)
				}
			}
			c.MustKubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/ratelimitpolicies.ratelimit.sluice.dev")
			tc.verify(t, c)
		})
	}
}

func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func verifyDefaults(t *testing.T, c *kubetest.Cluster) {
	for _, name := range []string{"sluice-controller", "sluice-check"} {
		d := get[appsv1.Deployment](t, c, "deployment", name)
		if *d.Spec.Replicas != 2 {
			t.Errorf("%s: %d replicas, want 2", name, *d.Spec.Replicas)
		}
		if img := container(t, d).Image; img != imageRepo+":latest" {
			t.Errorf("%s: image %s, want %s:latest (the chart's appVersion in a checkout)", name, img, imageRepo)
		}
	}
	for _, name := range []string{"sluice-redis-check", "sluice-redis-controller"} {
		s := get[corev1.Secret](t, c, "secret", name)
		if string(s.Data["url"]) != "redis://redis.sluice-system.svc.cluster.local:6379/0" {
			t.Errorf("%s: url %q", name, s.Data["url"])
		}
	}
	np := get[networkingv1.NetworkPolicy](t, c, "networkpolicy", "sluice-check")
	if got := np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != "ingress-nginx" {
		t.Errorf("NetworkPolicy sluice-check admits namespace %q, want ingress-nginx", got)
	}
	// The check endpoint's ServiceAccount may do nothing, the
	// controller's may not read Secrets.
	if out, _ := c.Kubectl("auth", "can-i", "--list", "--as=system:serviceaccount:sluice-system:sluice-check"); strings.Contains(out, "ratelimit") || strings.Contains(out, "secrets") {
		t.Errorf("the check ServiceAccount may:\n%s", out)
	}
	if out, _ := c.Kubectl("auth", "can-i", "get", "secrets", "-n", releaseNamespace, "--as=system:serviceaccount:sluice-system:sluice-controller"); strings.TrimSpace(out) != "no" {
		t.Errorf("the controller ServiceAccount may get Secrets: %q", out)
	}
	if out, _ := c.Kubectl("auth", "can-i", "watch", "ratelimitpolicies.ratelimit.sluice.dev", "-A", "--as=system:serviceaccount:sluice-system:sluice-controller"); strings.TrimSpace(out) != "yes" {
		t.Errorf("the controller ServiceAccount may not watch RateLimitPolicies: %q", out)
	}
}

func verifyFull(t *testing.T, c *kubetest.Cluster) {
	const img = "registry.example/platform/sluice@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ctrl := get[appsv1.Deployment](t, c, "deployment", "sluice-controller")
	check := get[appsv1.Deployment](t, c, "deployment", "sluice-check")
	for _, tc := range []struct {
		d        *appsv1.Deployment
		replicas int32
		args     []string
		memory   string
		secret   string
	}{
		{ctrl, 3, []string{"--sync-interval=5s", "--leader-elect-lease-duration=30s"}, "512Mi", "sluice-redis-controller"},
		{check, 4, []string{"--rls-domain=edge=gateway-system", "--rls-domain=internal=platform", "--rls-descriptor-limits=false", "--trusted-proxies=10.0.0.0/16"}, "1Gi", "sluice-check-redis"},
	} {
		name, ctr, spec := tc.d.Name, container(t, tc.d), tc.d.Spec.Template.Spec
		if *tc.d.Spec.Replicas != tc.replicas {
			t.Errorf("%s: %d replicas, want %d", name, *tc.d.Spec.Replicas, tc.replicas)
		}
		if ctr.Image != img || ctr.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %s (%s), want %s (IfNotPresent)", name, ctr.Image, ctr.ImagePullPolicy, img)
		}
		if n := len(ctr.Args); n < len(tc.args) || !slices.Equal(ctr.Args[n-len(tc.args):], tc.args) {
			t.Errorf("%s: args %q, want them to end with %q", name, ctr.Args, tc.args)
		}
		if got := ctr.Resources.Limits.Memory().String(); got != tc.memory {
			t.Errorf("%s: memory limit %s, want %s", name, got, tc.memory)
		}
		if ca := env(ctr, "SLUICE_REDIS_CA_FILE"); ca == nil || ca.Value != "/etc/sluice/redis/ca.crt" {
			t.Errorf("%s: SLUICE_REDIS_CA_FILE %v", name, ca)
		}
		if url := env(ctr, "SLUICE_REDIS_URL"); url == nil || url.ValueFrom.SecretKeyRef.Name != tc.secret {
			t.Errorf("%s: SLUICE_REDIS_URL %v, want from Secret %s", name, url, tc.secret)
		}
		if tc.d == check {
			verifyTracing(t, ctr)
		}
		if spec.Volumes[0].Secret.SecretName != tc.secret {
			t.Errorf("%s: mounts Secret %s, want %s", name, spec.Volumes[0].Secret.SecretName, tc.secret)
		}
		if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-credentials" {
			t.Errorf("%s: imagePullSecrets %v", name, spec.ImagePullSecrets)
		}
		if spec.NodeSelector["kubernetes.io/os"] != "linux" || len(spec.Tolerations) != 1 || spec.Affinity == nil {
			t.Errorf("%s: nodeSelector %v, tolerations %v, affinity %v", name, spec.NodeSelector, spec.Tolerations, spec.Affinity)
		}
		if tc.d.Spec.Template.Annotations["example.com/team"] != "platform" || tc.d.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
			t.Errorf("%s: pod annotations %v", name, tc.d.Spec.Template.Annotations)
		}
	}
	if ctrl.Spec.Template.Spec.Affinity.NodeAffinity == nil || check.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("the affinity values did not replace the defaults")
	}
	// The check endpoint reads its existing Secret: the chart makes none.
	if _, err := c.Kubectl("get", "-n", releaseNamespace, "secret", "sluice-redis-check"); err == nil {
		t.Errorf("Secret sluice-redis-check exists though redis.check.existingSecret is set")
	}
	s := get[corev1.Secret](t, c, "secret", "sluice-redis-controller")
	for k, want := range map[string]string{
		"url": "rediss://redis.data.svc.cluster.local:6380/0", "username": "sluice-controller", "password": "controller-password",
		"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n",
	} {
		if string(s.Data[k]) != want {
			t.Errorf("Secret sluice-redis-controller: %s = %q, want %q", k, s.Data[k], want)
		}
	}
	np := get[networkingv1.NetworkPolicy](t, c, "networkpolicy", "sluice-check")
	var ns []string
	for _, rule := range np.Spec.Ingress {
		for _, from := range rule.From {
			ns = append(ns, from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
		}
	}
	if want := []string{"ingress-nginx", "envoy-gateway-system", "monitoring", "observability"}; !slices.Equal(ns, want) {
		t.Errorf("NetworkPolicy sluice-check admits %v, want %v", ns, want)
	}
	pdb := c.MustKubectl("get", "-n", releaseNamespace, "pdb", "sluice-check", "-o", "jsonpath={.spec.minAvailable}")
	if pdb != "2" {
		t.Errorf("PodDisruptionBudget sluice-check: minAvailable %s, want 2", pdb)
	}
	crd := c.MustKubectl("get", "crd", "ratelimitpolicies.ratelimit.sluice.dev", "-o", "jsonpath={.metadata.annotations}")
	if strings.Contains(crd, "resource-policy") {
		t.Errorf("crds.keep=false, but the CRD is annotated %s", crd)
	}
	dashboard, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(t), "config", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := get[corev1.ConfigMap](t, c, "configmap", "sluice-grafana-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["team"] != "platform" || cm.Annotations["grafana_folder"] != "Sluice" {
		t.Errorf("ConfigMap sluice-grafana-dashboard: labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
	if cm.Data["sluice.json"] != string(dashboard) {
		t.Errorf("ConfigMap sluice-grafana-dashboard: sluice.json is not config/prometheus/dashboard.json")
	}
}

// helm itself: install into a fresh namespace, upgrade with new values,
// uninstall (the CRD stays), and a wrong value refused at install naming
// its field.
func TestHelmInstall(t *testing.T) {
	helm, chart := tool(t, "helm"), chartDir(t)
	c := kubetest.Start(t, kubetest.Options{})
	h := func(args ...string) (string, error) {
		stdout, stderr, err := runErr("", nil, 2*time.Minute, helm, append(args, "--kubeconfig", c.Kubeconfig)...)
		if err != nil {
			return stdout, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr, stdout)
		}
		return stdout, nil
	}

	out, err := h("install", "sluice", chart, "--namespace", releaseNamespace, "--create-namespace", "--values", testdata(t, "values-wrong-type.yaml"))
	if err == nil || !strings.Contains(err.Error(), "at '/check/replicas': got string, want integer") {
		t.Fatalf("helm install with values-wrong-type.yaml: err %v, want the schema to name /check/replicas\n%s", err, out)
	}
	t.Logf("refused: %v", err)
	if out, _ := c.Kubectl("get", "namespace", releaseNamespace); strings.Contains(out, releaseNamespace) {
		t.Errorf("the refused install left namespace %s", releaseNamespace)
	}

	if out, err = h("install", "sluice", chart, "--namespace", releaseNamespace, "--create-namespace",
		"--set", "redis.url=redis://redis.data:6379/0", "--set", "redis.check.password=p1", "--set", "redis.controller.password=p2"); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install:\n%s", out)
	s := get[corev1.Secret](t, c, "secret", "sluice-redis-check")
	if string(s.Data["url"]) != "redis://redis.data:6379/0" || string(s.Data["password"]) != "p1" || string(s.Data["username"]) != "sluice-check" {
		t.Errorf("Secret sluice-redis-check: %q", s.Data)
	}

	if _, err = h("upgrade", "sluice", chart, "--namespace", releaseNamespace, "--reuse-values",
		"--set", "check.replicas=5", "--set", "check.rlsDomains.edge=gateway-system"); err != nil {
		t.Fatal(err)
	}
	check := get[appsv1.Deployment](t, c, "deployment", "sluice-check")
	if *check.Spec.Replicas != 5 || !slices.Contains(container(t, check).Args, "--rls-domain=edge=gateway-system") {
		t.Errorf("after helm upgrade: %d replicas, args %q", *check.Spec.Replicas, container(t, check).Args)
	}
	if s := get[corev1.Secret](t, c, "secret", "sluice-redis-check"); string(s.Data["password"]) != "p1" {
		t.Errorf("helm upgrade --reuse-values lost the password")
	}

	if out, err = h("uninstall", "sluice", "--namespace", releaseNamespace); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall:\n%s", out)
	if _, err := c.Kubectl("get", "crd", "ratelimitpolicies.ratelimit.sluice.dev"); err != nil {
		t.Errorf("the CRD went with helm uninstall (every policy with it): %v", err)
	}
	if out, _ := c.Kubectl("get", "deployments", "-n", releaseNamespace, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("helm uninstall left %s", out)
	}
}

// values.schema.json refuses a wrong value and names its field.
// verifyTracing checks the OTEL_* variables values-full.yaml sets on the
// check container, and its extraEnv.
func verifyTracing(t *testing.T, ctr corev1.Container) {
	t.Helper()
	for name, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "edge-sluice",
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=production,team=edge",
	} {
		if e := env(ctr, name); e == nil || e.Value != want {
			t.Errorf("check: %s %v, want %q", name, e, want)
		}
	}
	if e := env(ctr, "OTEL_EXPORTER_OTLP_HEADERS"); e == nil || e.ValueFrom.SecretKeyRef.Name != "otlp-headers" {
		t.Errorf("check: extraEnv OTEL_EXPORTER_OTLP_HEADERS %v", e)
	}
}

func TestChartSchema(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		name, values, want string
	}{
		{"wrong type", "", "at '/check/replicas': got string, want integer"},
		{"misspelled field", "check:\n  replica: 3\n", "at '/check': additional properties 'replica' not allowed"},
		{"misspelled top-level field", "networkPolicies:\n  enabled: false\n", "additional properties 'networkPolicies' not allowed"},
		{"short digest", "image:\n  digest: sha256:beef\n", "at '/image/digest'"},
		{"no ingress namespace", "networkPolicy:\n  ingressNamespaces: []\n", "at '/networkPolicy/ingressNamespaces'"},
		{"bad namespace", "check:\n  rlsDomains:\n    edge: Gateway_System\n", "at '/check/rlsDomains/edge'"},
		{"bad quantity", "controller:\n  resources:\n    limits:\n      memory: lots\n", "at '/controller/resources/limits/memory'"},
		{"not a flag", "check:\n  extraArgs: [trusted-proxies=10.0.0.0/8]\n", "at '/check/extraArgs/0'"},
		{"not a Redis URL", "redis:\n  url: http://redis:6379\n", "at '/redis/url'"},
		{"unknown OTLP protocol", "tracing:\n  protocol: http/json\n", "at '/tracing/protocol'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := testdata(t, "values-wrong-type.yaml")
			if tc.values != "" {
				file = filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(file, []byte(tc.values), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			stdout, stderr, err := runErr("", nil, time.Minute, helm, "template", "sluice", chartDir(t), "--values", file)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("helm template with\n%s\nerr %v, want an error naming %q:\n%s%s", tc.values, err, tc.want, stderr, stdout)
			}
		})
	}
}
