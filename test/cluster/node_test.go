package cluster

import (
	"testing"
)

// TestNode runs the user's journey on the node, in order: each step
// starts from what the one before left, so the first failure ends it.
func TestNode(t *testing.T) {
	for _, step := range []struct {
		name string
		run  func(t *testing.T, c *cluster)
	}{
		{"install from dist/install.yaml", installFromInstaller},
		{"containers as the manifests say", securityContext},
		{"real proxies through the check Service", throughProxies},
		{"day-two operations through the API server", dayTwoThroughTheAPIServer},
		{"rolling upgrade under load", rollingUpgrade},
		{"leader failover", leaderFailover},
		{"a check pod killed under load", checkPodKilled},
		{"Redis restarted", redisRestarted},
		{"helm install then upgrade then uninstall", helmLifecycle},
	} {
		if !t.Run(step.name, func(t *testing.T) { step.run(t, node) }) {
			return
		}
	}
}
