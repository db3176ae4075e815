package policyfiles

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/policycases"
	"github.com/sluice-dev/sluice/middleware"
)

// The parity test runs every case of the table test/cel runs against a
// real kube-apiserver through local mode's reading of a file and through
// the middleware's Go checks: each accepts what the API server accepts and
// refuses what it refuses, naming the same field (local mode in the API
// server's words, as it applies the same schema).
func TestParityWithTheAPIServer(t *testing.T) {
	for _, c := range policycases.AcceptedPolicies() {
		t.Run("accepted/"+c.Name, func(t *testing.T) {
			text := caseManifest(t, policycases.KindPolicy, c)
			if c.ClusterOnly != "" {
				// Served only in a cluster: refused outside one, naming why.
				clusterOnly := policycases.Case{Name: c.Name, Field: c.ClusterOnly}
				expectRefusal(t, "local mode", readAsLocalMode(text), clusterOnly, false)
				expectRefusal(t, "the middleware", readAsMiddleware(text), clusterOnly, false)
				return
			}
			if err := readAsLocalMode(text); err != nil {
				t.Errorf("local mode refuses what the API server accepts: %v", err)
			}
			if err := readAsMiddleware(text); err != nil {
				t.Errorf("the middleware refuses what the API server accepts: %v", err)
			}
		})
	}
	for _, c := range policycases.RefusedPolicies() {
		t.Run("refused/"+c.Name, func(t *testing.T) {
			text := caseManifest(t, policycases.KindPolicy, c)
			expectRefusal(t, "local mode", readAsLocalMode(text), c, true)
			expectRefusal(t, "the middleware", readAsMiddleware(text), c, false)
		})
	}
}

// TestOverridesParityWithTheAPIServer is the same for RateLimitOverrides,
// which only local mode reads from files (the middleware takes none).
func TestOverridesParityWithTheAPIServer(t *testing.T) {
	for _, c := range policycases.AcceptedOverrides() {
		t.Run("accepted/"+c.Name, func(t *testing.T) {
			if err := readAsLocalMode(caseManifest(t, policycases.KindOverrides, c)); err != nil {
				t.Errorf("local mode refuses what the API server accepts: %v", err)
			}
		})
	}
	for _, c := range policycases.RefusedOverrides() {
		t.Run("refused/"+c.Name, func(t *testing.T) {
			expectRefusal(t, "local mode", readAsLocalMode(caseManifest(t, policycases.KindOverrides, c)), c, true)
		})
	}
}

func caseManifest(t *testing.T, kind string, c policycases.Case) string {
	t.Helper()
	text, err := c.Manifest(kind, "default", "parity")
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// readAsMiddleware builds a limiter from text as a service would.
func readAsMiddleware(text string) error {
	l, err := middleware.New(middleware.WithPolicyYAML(text))
	if err != nil {
		return err
	}
	return l.Close()
}

// expectRefusal asserts that err refuses c naming its field, and with
// apiWords also in the API server's words.
func expectRefusal(t *testing.T, who string, err error, c policycases.Case, apiWords bool) {
	t.Helper()
	if err == nil {
		t.Errorf("%s accepts what the API server refuses (%s)", who, c.Field)
		return
	}
	if !namesField(err.Error(), c.Field) {
		t.Errorf("%s refuses without naming %s: %v", who, c.Field, err)
	}
	if !apiWords {
		return
	}
	for _, w := range c.Words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s's refusal lacks the API server's words %q: %v", who, w, err)
		}
	}
}

// namesField reports whether msg names field, or a field inside it (the
// API server names "spec.match.exemptClients" for a rule on the list, Go
// "spec.match.exemptClients[1]" for its entry).
func namesField(msg, field string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], field)
		if j < 0 {
			return false
		}
		end := i + j + len(field)
		if end < len(msg) && strings.ContainsRune(":.[\"", rune(msg[end])) {
			return true
		}
		i = end
	}
}
