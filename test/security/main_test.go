// Package security tests least privilege against real servers: the Redis
// ACL users shipped in config/redis/users.acl, with `manager controller`
// and `manager check` (built from this tree) running as those users against
// a real redis-server and API server (envtest), what each user is refused,
// how the check endpoint behaves when the library is flushed (its user may
// not load it), the same users against a Redis Cluster, and Redis over TLS
// with a CA the test generates.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2 go test ./test/security/ -v
package security

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "security") }
