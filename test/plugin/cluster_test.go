package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sluice-dev/sluice/internal/sluicectl"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// apiService registers the admin API's group with a Service that does not
// exist, as a cluster whose Sluice is not running has it.
const apiService = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.admin.ratelimit.sluice.dev
spec:
  group: admin.ratelimit.sluice.dev
  version: v1alpha1
  service: {namespace: sluice-system, name: sluice-admin, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
`

// tokenKubeconfig writes a kubeconfig for c's API server whose user has a
// token the API server does not know.
func tokenKubeconfig(t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["stranger"] = &clientcmdapi.AuthInfo{Token: "not-a-token"}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "stranger"}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "stranger.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestThroughAPIServer runs the plugin with kubeconfigs of a real API
// server (client certificates, a token) and checks what it says when the
// admin API cannot answer: the caller unknown, refused, the APIService
// missing or its server down.
func TestThroughAPIServer(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	s := sluice{bin: manager.Plugin(t)}
	inspect := []string{"inspect", "shop/per-client", "acme", "--kubeconfig"}

	// The admin, by client certificate: let through, but nothing serves the group.
	s.fails(t, sluicectl.ExitError, "the APIService v1alpha1.admin.ratelimit.sluice.dev is missing", append(inspect, c.Kubeconfig)...)
	// bob, by client certificate, with no role: refused by the API server.
	bob := c.UserKubeconfig("bob")
	s.fails(t, sluicectl.ExitForbidden, `User "bob" cannot get resource "ratelimitpolicies/keys" in API group "admin.ratelimit.sluice.dev"`, append(inspect, bob)...)
	s.fails(t, sluicectl.ExitForbidden, "refused the call before it reached Sluice", append(inspect, bob)...)
	// alice may read with Sluice's view role, not reset: refused by the API
	// server, whose refusal the hint turns into the role reset needs.
	c.MustKubectl("apply", "-f", filepath.Join(kubetest.RepoRoot(t), "config", "rbac", "admin_user_roles.yaml"))
	c.MustKubectl("create", "namespace", "shop")
	c.MustKubectl("create", "rolebinding", "alice", "-n", "shop", "--clusterrole=sluice-admin-view", "--user=alice")
	alice := c.UserKubeconfig("alice")
	reset := []string{"reset", "shop/per-client", "acme", "--kubeconfig", alice}
	s.fails(t, sluicectl.ExitForbidden, `User "alice" cannot delete resource "ratelimitpolicies/keys" in API group "admin.ratelimit.sluice.dev"`, reset...)
	s.fails(t, sluicectl.ExitForbidden, "reset needs delete on ratelimitpolicies/keys in API group admin.ratelimit.sluice.dev (and update on ratelimitpolicies/keys in ratelimit.sluice.dev, which Sluice checks next); Sluice's ClusterRole sluice-admin-edit (aggregated into edit and admin) grants both", reset...)
	// A token the API server does not know.
	s.fails(t, sluicectl.ExitUnauthorized, "kubectl auth whoami", append(inspect, tokenKubeconfig(t, c))...)

	// The APIService registered, its Service absent.
	file := filepath.Join(t.TempDir(), "apiservice.yaml")
	if err := os.WriteFile(file, []byte(apiService), 0o644); err != nil {
		t.Fatal(err)
	}
	c.MustKubectl("apply", "-f", file)
	s.fails(t, sluicectl.ExitError, "is registered but its server does not answer", append(inspect, c.Kubeconfig)...)
}
