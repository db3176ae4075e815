package handover

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// A person runs `manager controller` (or `manager all`) on a laptop with
// --kubeconfig against a fresh API server: no sluice-system namespace, no
// flag about leader election. Election is off by default, so the policy
// turns Ready and nothing asks for a Lease.
func TestOutOfClusterStartNeedsNoLeaderElectionFlags(t *testing.T) {
	ctx := context.Background()
	root := kubetest.RepoRoot(t)
	bin := manager.Path(t)
	srv := redistest.Start(t)
	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	k := systest.KubeClient(t, kube.Config)
	dir := t.TempDir()

	for _, sub := range []string{"controller", "all"} {
		t.Run(sub, func(t *testing.T) {
			ns := "laptop-" + sub
			systest.CreateNamespaces(t, k, ns)
			probe := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
			args := []string{sub, "--kubeconfig", kube.Kubeconfig, "--redis-url", "redis://" + srv.Addr() + "/0",
				"--metrics-bind-address", "0", "--health-probe-bind-address", probe}
			if sub == "all" {
				args = append(args, "--listen", fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t)))
			}
			proc := systest.Start(t, dir, sub, nil, bin, args...)
			proc.WaitHTTP(t, "http://"+probe+"/readyz", 30*time.Second)

			p := systest.Policy(ns, "api", "/api", ratelimitv1alpha1.FailureModeOpen, systest.FixedWindow("hour", 5, "1h"))
			if err := k.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			systest.WaitReady(t, k, ns, "api", 30*time.Second)
			if proc.LogContains("not found") {
				t.Errorf("the log reports something not found:\n%s", proc.Tail(20))
			}
			err := k.Get(ctx, types.NamespacedName{Name: leaseNamespace}, &corev1.Namespace{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("namespace %s: %v; the test needs an API server without it", leaseNamespace, err)
			}
			proc.Stop()
		})
	}
}
