package convert

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// TestConvertedPoliciesApply converts every configuration of the
// converter's own test data (inexact ones with --allow-partial) and this
// package's, and applies each output to a real API server with `kubectl
// apply --server-side`: every policy must be accepted by the CRD's
// OpenAPI schema and CEL rules, exactly as written.
func TestConvertedPoliciesApply(t *testing.T) {
	root := kubetest.RepoRoot(t)
	cluster := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	src := filepath.Join(root, "internal", "convert", "envoyratelimit", "testdata")

	singles, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases [][]string
	for _, f := range singles {
		if !strings.HasPrefix(filepath.Base(f), "merge-") {
			cases = append(cases, []string{f})
		}
	}
	cases = append(cases,
		[]string{"--merge-domains", filepath.Join(src, "merge-1.yaml"), filepath.Join(src, "merge-2.yaml")},
		[]string{"--failure-mode", "Closed", filepath.Join(src, "domain-a.yaml"), filepath.Join(src, "domain-b.yaml")},
		[]string{filepath.Join("testdata", "edge.yaml"), filepath.Join("testdata", "partner.yaml")},
	)

	total := 0
	for i, args := range cases {
		ns := fmt.Sprintf("convert-%d", i)
		var files []string
		for _, a := range args {
			if strings.HasSuffix(a, ".yaml") {
				files = append(files, strings.TrimSuffix(filepath.Base(a), ".yaml"))
			}
		}
		name := strings.Join(files, "+")
		t.Run(name, func(t *testing.T) {
			out, stderr, code := convert(t, append([]string{"--namespace", ns, "--allow-partial"}, args...)...)
			if code != 0 {
				t.Fatalf("exit status %d:\n%s", code, stderr)
			}
			want := bytes.Count(out, []byte("\nkind: RateLimitPolicy\n"))
			if want == 0 {
				t.Fatalf("no policy converted:\n%s", stderr)
			}
			cluster.MustKubectl("create", "namespace", ns)
			if msg, err := cluster.KubectlStdin(out, "apply", "--server-side", "--field-manager", "convert-test", "-f", "-"); err != nil {
				t.Fatalf("the API server refuses the converted policies: %v\n%s\n--- converted:\n%s", err, msg, out)
			}
			got := strings.Fields(cluster.MustKubectl("get", "rlp", "-n", ns, "-o", "name"))
			if len(got) != want {
				t.Fatalf("%d policies in %s, want %d: %v", len(got), ns, want, got)
			}
			total += want
		})
	}
	t.Logf("%d converted policies applied", total)
}
