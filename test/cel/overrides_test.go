package cel

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
		func(spec string) {
			Expect(k8sClient.Create(ctx, overridesFromSpec(namespace, spec))).To(Succeed())
		},
		Entry("one key, one limit", "policyName: api\noverrides: [{key: acme, limits: [{name: minute, limit: 1000}]}]\n"),
		Entry("several keys and limits, an expiry", `
policyName: api
overrides:
- {key: "203.0.113.0/24", limits: [{name: minute, limit: 1}, {name: day, limit: 1000000000}]}
- {key: "key:acme", limits: [{name: minute, limit: 5}], expires: "2030-01-01T00:00:00Z"}
`),
	)

	DescribeTable("invalid overrides are rejected with a message a person can act on",
		func(spec string, wantMessages ...string) {
			err := k8sClient.Create(ctx, overridesFromSpec(namespace, spec))
			Expect(err).To(HaveOccurred(), "the API server accepted invalid overrides")
			for _, want := range wantMessages {
				Expect(err.Error()).To(ContainSubstring(want))
			}
		},
		Entry("no policy", "overrides: [{key: a, limits: [{name: l, limit: 1}]}]\n", "spec.policyName", "Required value"),
		Entry("no entries", "policyName: api\noverrides: []\n", "spec.overrides"),
		Entry("a key twice", "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 1}]}, {key: a, limits: [{name: l, limit: 2}]}]\n",
			"spec.overrides[1]", "Duplicate value"),
		Entry("a limit twice", "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 1}, {name: l, limit: 2}]}]\n",
			"spec.overrides[0].limits[1]", "Duplicate value"),
		Entry("a limit name that is no DNS label", "policyName: api\noverrides: [{key: a, limits: [{name: Per_Minute, limit: 1}]}]\n",
			"spec.overrides[0].limits[0].name"),
		Entry("a number of 0", "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 0}]}]\n",
			"spec.overrides[0].limits[0].limit", "should be greater than or equal to 1"),
		Entry("an empty key", "policyName: api\noverrides: [{key: '', limits: [{name: l, limit: 1}]}]\n", "spec.overrides[0].key"),
		Entry("a key too long", "policyName: api\noverrides: [{key: "+strings.Repeat("k", 1025)+", limits: [{name: l, limit: 1}]}]\n", "spec.overrides[0].key", "Too long"),
	)
})
