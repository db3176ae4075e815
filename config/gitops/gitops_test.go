// Package gitops tests the health rules GitOps tools apply to
// RateLimitPolicies: the Argo CD Lua health check in argocd/ and the kstatus
// reading Flux uses (flux/), against statuses the real reconciler writes on
// a real API server.
package gitops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/testutil/argohealth"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The argocd-cm snippet must carry health.lua exactly.
func TestArgoCDConfigMapEmbedsHealthLua(t *testing.T) {
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join("argocd", "argocd-cm.yaml"))), &cm); err != nil {
		t.Fatal(err)
	}
	const key = "resource.customizations.health.ratelimit.sluice.dev_RateLimitPolicy"
	got, ok := cm.Data[key]
	if cm.Kind != "ConfigMap" || !ok {
		t.Fatalf("argocd/argocd-cm.yaml: want a ConfigMap with data[%q]", key)
	}
	if want := readFile(t, filepath.Join("argocd", "health.lua")); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("argocd/argocd-cm.yaml differs from argocd/health.lua; regenerate it from health.lua (indent every line by 4 spaces)")
	}
}

// publisher stands in for Redis: it accepts every entry, or fails every
// write as an unreachable Redis does.
type publisher struct {
	err error
	rev int64
}

func (p *publisher) Apply(context.Context, *policytable.Entry) (int64, error) {
	if p.err != nil {
		return 0, p.err
	}
	p.rev++
	return p.rev, nil
}

func (p *publisher) Remove(context.Context, string, string) error { return p.err }

func TestHealthOfControllerStatuses(t *testing.T) {
	root := kubetest.RepoRoot(t)
	cluster := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	ctx := t.Context()
	c, err := client.New(cluster.Config, client.Options{Scheme: app.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	script := readFile(t, filepath.Join("argocd", "health.lua"))
	const ns = "default"

	ok := &publisher{}
	down := &publisher{err: errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")}
	reconcile := func(name string, p controller.Publisher) {
		t.Helper()
		r := &controller.Reconciler{Client: c, Publisher: p, LastGood: controller.NewLastGood(), LibraryVersion: "test"}
		// Errors are the outcome under test (stalled, Redis down); the
		// status is what counts.
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	create := func(name, when string) {
		t.Helper()
		p := &ratelimitv1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ratelimitv1alpha1.RateLimitPolicySpec{
				Match: ratelimitv1alpha1.RequestMatch{When: when},
				Key:   "global",
				Limits: []ratelimitv1alpha1.Limit{{
					Name:        "minute",
					FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1m"},
				}},
			},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(name string) {
		t.Helper()
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		p.Spec.Limits[0].FixedWindow.Limit = 20
		if err := c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	const badWhen = `request.hedaers["x-plan"] == "free"` // accepted by the API server, fails to compile

	// Each case: a policy brought into one state by the real reconciler.
	create("fresh", "")

	create("ready", "")
	reconcile("ready", ok)

	create("edited", "")
	reconcile("edited", ok)
	edit("edited") // generation 2, not reconciled yet

	create("invalid", badWhen)
	reconcile("invalid", ok)

	create("invalid-update", "")
	reconcile("invalid-update", ok)
	var p ratelimitv1alpha1.RateLimitPolicy
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "invalid-update"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Match.When = badWhen
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	reconcile("invalid-update", ok)

	create("redis-down", "")
	reconcile("redis-down", down)

	create("redis-back", "")
	reconcile("redis-back", down)
	reconcile("redis-back", ok)

	for _, tc := range []struct {
		name        string
		argo        string
		argoMessage string
		kstatus     status.Status
	}{
		// A new policy's status.observedGeneration is -1 (the CRD's
		// default) until the controller decides: kstatus, and so Flux,
		// read it as InProgress, never as Current.
		{name: "fresh", argo: argohealth.Progressing, argoMessage: "Waiting for the Sluice controller", kstatus: status.InProgressStatus},
		{name: "ready", argo: argohealth.Healthy, argoMessage: "In force: policy table revision", kstatus: status.CurrentStatus},
		{name: "edited", argo: argohealth.Progressing, argoMessage: "generation 2", kstatus: status.InProgressStatus},
		{name: "invalid", argo: argohealth.Degraded, argoMessage: "spec.match.when", kstatus: status.FailedStatus},
		{name: "invalid-update", argo: argohealth.Degraded, argoMessage: "last good version stays in force", kstatus: status.FailedStatus},
		{name: "redis-down", argo: argohealth.Progressing, argoMessage: "Redis: dial tcp 10.0.0.7:6379: connect: connection refused; retrying", kstatus: status.InProgressStatus},
		{name: "redis-back", argo: argohealth.Healthy, argoMessage: "In force", kstatus: status.CurrentStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What Argo CD and Flux read: the object as the API server serves it.
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(ratelimitv1alpha1.GroupVersion.WithKind("RateLimitPolicy"))
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, u); err != nil {
				t.Fatal(err)
			}
			st, _ := yaml.Marshal(u.Object["status"])
			t.Logf("generation %d, status:\n%s", u.GetGeneration(), st)

			res, err := argohealth.Evaluate(script, u.Object)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Argo CD: %s: %s", res.Status, res.Message)
			if res.Status != tc.argo || !strings.Contains(res.Message, tc.argoMessage) {
				t.Errorf("Argo CD health = %s %q, want %s with %q", res.Status, res.Message, tc.argo, tc.argoMessage)
			}

			ks, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if ks.Status != tc.kstatus {
				t.Errorf("kstatus = %s (%s), want %s", ks.Status, ks.Message, tc.kstatus)
			}
			t.Logf("kstatus (Flux): %s: %s", ks.Status, ks.Message)
		})
	}
}
