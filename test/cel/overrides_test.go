package cel

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-dev/sluice/internal/testutil/policycases"
)

// overridesFromSpec builds an unstructured RateLimitOverrides from a YAML
// spec.
func overridesFromSpec(namespace, specYAML string) *unstructured.Unstructured {
	return objectFromSpec("RateLimitOverrides", namespace, specYAML)
}

var _ = Describe("RateLimitOverrides validation", func() {
	var namespace string
	BeforeEach(func() { namespace = newNamespace() })

	DescribeTable("valid overrides are accepted",
		func(c policycases.Case) {
			Expect(k8sClient.Create(ctx, overridesFromSpec(namespace, c.Spec), strict)).To(Succeed())
		},
		entries(policycases.AcceptedOverrides()),
	)

	DescribeTable("invalid overrides are rejected with a message a person can act on",
		func(c policycases.Case) {
			expectRefused(k8sClient.Create(ctx, overridesFromSpec(namespace, c.Spec), strict), c)
		},
		entries(policycases.RefusedOverrides()),
	)
})
