// Package convert tests `manager convert envoy-ratelimit` as a person uses
// it: the built binary converts envoyproxy/ratelimit configuration files,
// and its output is applied to a real API server (every converted policy
// must pass the CRD's schema and CEL rules), then served by `manager local`
// beside envoyproxy/ratelimit's own service_cmd on one real redis-server,
// where the same rate limit service requests must get the same answers.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/<version> go test ./test/convert/ -v
package convert

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "convert") }

// convert runs `manager convert envoy-ratelimit args...` and returns its
// standard output, standard error and exit status.
func convert(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(manager.Path(t), append([]string{"convert", "envoy-ratelimit"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.Bytes(), errOut.Bytes(), code
}
