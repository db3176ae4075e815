package middleware_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The middleware is a library services import: it checks policies with Go
// (proven equal to the CRD schema by internal/policyfiles' parity test)
// rather than the API server's libraries, which would come with them.
func TestDoesNotImportTheAPIServerLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, module := range []string{"k8s.io/apiextensions-apiserver", "k8s.io/apiserver"} {
			if pkg == module || strings.HasPrefix(pkg, module+"/") {
				t.Errorf("the middleware depends on %s", pkg)
			}
		}
	}
}
