package cel

import (
	"fmt"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/policycases"
)

var policyCounter atomic.Int64

// policyFromSpec builds an unstructured RateLimitPolicy from a YAML spec, so
// the table can hold what Go types cannot express (two algorithms, bad enums).
func policyFromSpec(namespace, specYAML string) *unstructured.Unstructured {
	return objectFromSpec("RateLimitPolicy", namespace, specYAML)
}

// objectFromSpec builds an unstructured object of the API's kind from a
// YAML spec, with a name of its own.
func objectFromSpec(kind, namespace, specYAML string) *unstructured.Unstructured {
	var spec map[string]any
	Expect(yaml.Unmarshal([]byte(specYAML), &spec)).To(Succeed())
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(ratelimitv1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(fmt.Sprintf("%s-%d", strings.ToLower(kind), policyCounter.Add(1)))
	return u
}

func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cel-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(ctx, ns) })
	return ns.Name
}

// tokenBucket10 is a spec with one token bucket, for the cases below.
const tokenBucket10 = `
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
`

// strict creates as kubectl does: a field the schema does not know is an
// error, not dropped.
var strict = client.FieldValidation(metav1.FieldValidationStrict)

// entries are the table's cases as Ginkgo entries, each named for its case.
func entries(cases []policycases.Case) []TableEntry {
	out := make([]TableEntry, len(cases))
	for i, c := range cases {
		out[i] = Entry(c.Name, c)
	}
	return out
}

// expectRefused asserts that err is the API server's refusal of c: it
// names c's field and holds c's words.
func expectRefused(err error, c policycases.Case) {
	Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
	Expect(err.Error()).To(ContainSubstring(c.Field))
	for _, want := range c.Words {
		Expect(err.Error()).To(ContainSubstring(want))
	}
}

var _ = Describe("RateLimitPolicy validation", func() {
	var namespace string
	BeforeEach(func() { namespace = newNamespace() })

	DescribeTable("valid policies are accepted",
		func(c policycases.Case) {
			Expect(k8sClient.Create(ctx, policyFromSpec(namespace, c.Spec), strict)).To(Succeed())
		},
		entries(policycases.AcceptedPolicies()),
	)

	DescribeTable("invalid policies are rejected with a message a person can act on",
		func(c policycases.Case) {
			expectRefused(k8sClient.Create(ctx, policyFromSpec(namespace, c.Spec), strict), c)
		},
		entries(policycases.RefusedPolicies()),
	)

	It("fills in the documented defaults", func() {
		u := policyFromSpec(namespace, `
limits:
- name: leak
  leakyBucket: {capacity: 5, leakRate: 1}
`)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var got ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &got)).To(Succeed())
		// The key has no schema default: its default depends on the kind
		// of policy ({client_ip}, or {descriptor} for a descriptor policy),
		// so the compiler fills it in.
		Expect(got.Spec.Key).To(BeEmpty())
		Expect(got.Spec.OnMissingKey).To(Equal(ratelimitv1alpha1.OnMissingKeySkip))
		Expect(got.Spec.Cost).To(Equal(ratelimitv1alpha1.Count(1)))
		Expect(got.Spec.Mode).To(Equal(ratelimitv1alpha1.ModeEnforce))
		Expect(got.Spec.FailureMode).To(Equal(ratelimitv1alpha1.FailureModeOpen))
		Expect(got.Spec.Response.Headers).To(Equal(ratelimitv1alpha1.HeaderStyleBoth))
		Expect(got.Spec.Limits[0].LeakyBucket.LeakInterval).To(Equal(ratelimitv1alpha1.Duration("1s")))
		Expect(got.Status.ObservedGeneration).To(Equal(int64(-1)), "a policy no controller has seen reports observedGeneration -1")
	})

	It("defaults a lease's ttl to 1s", func() {
		u := policyFromSpec(namespace, "lease: {units: 3}\n"+tokenBucket10)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var got ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &got)).To(Succeed())
		Expect(got.Spec.Lease).To(Equal(&ratelimitv1alpha1.Lease{Units: 3, TTL: "1s"}))
	})

	It("rejects an invalid update and keeps the stored version", func() {
		u := policyFromSpec(namespace, tokenBucket10)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var p ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &p)).To(Succeed())
		p.Spec.Limits[0].TokenBucket.RefillInterval = "soon"
		err := k8sClient.Update(ctx, &p)
		Expect(err).To(MatchError(ContainSubstring("must be a duration such as")))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &p)).To(Succeed())
		Expect(p.Spec.Limits[0].TokenBucket.RefillInterval).To(Equal(ratelimitv1alpha1.Duration("1s")))
	})

	It("reports every mistake of a policy at once", func() {
		err := k8sClient.Create(ctx, policyFromSpec(namespace, `
mode: Audit
limits:
- name: burst
  tokenBucket: {capacity: 0, refillRate: 1, refillInterval: 1s}
`))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.mode"), ContainSubstring("spec.limits[0].tokenBucket.capacity")))
	})
})
