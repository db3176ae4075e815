package controller_test

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/overrides"
)

// overridesObject overrides the key values of policy, each entry one
// limit's number.
func overridesObject(namespace, name, policy string, entries ...ratelimitv1alpha1.Override) *ratelimitv1alpha1.RateLimitOverrides {
	return &ratelimitv1alpha1.RateLimitOverrides{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       ratelimitv1alpha1.RateLimitOverridesSpec{PolicyName: policy, Overrides: entries},
	}
}

func overrideEntry(key, limit string, n int64) ratelimitv1alpha1.Override {
	return ratelimitv1alpha1.Override{Key: key, Limits: []ratelimitv1alpha1.OverrideLimit{{Name: limit, Limit: ratelimitv1alpha1.Count(n)}}}
}

// overridesReady returns the object's Ready condition, nil until it has one.
func overridesReady(g Gomega, namespace, name string) (*metav1.Condition, ratelimitv1alpha1.RateLimitOverridesStatus) {
	var o ratelimitv1alpha1.RateLimitOverrides
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &o)).To(Succeed())
	return apimeta.FindStatusCondition(o.Status.Conditions, ratelimitv1alpha1.ConditionReady), o.Status
}

var _ = Describe("RateLimitOverrides", func() {
	It("applies the valid entries within a second and reports the others in status", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "p", 2))).To(Succeed())
		eventuallyEnforced(ns, "p", 1)
		Expect(allowedUntilDenied(ns)).To(Equal(2))

		created := time.Now()
		Expect(k8sClient.Create(ctx, overridesObject(ns, "tenants", "p",
			overrideEntry("other", "hourly", 7),
			overrideEntry("global", "hourly", 6),
			overrideEntry("third", "daily", 3)))).To(Succeed())
		Eventually(func() int64 {
			if o := checkOverrides.Override(checkReader.Policies().Get(ns, "p"), "global"); o != nil {
				return o.Quotas["hourly"]
			}
			return 0
		}, 5*time.Second, 10*time.Millisecond).Should(Equal(int64(6)))
		Expect(time.Since(created)).To(BeNumerically("<", time.Second))
		Expect(allowedUntilDenied(ns)).To(Equal(4)) // 2 used of the override's 6

		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "tenants")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonPartiallyApplied))
			g.Expect(st.Applied).To(Equal(int32(2)))
			g.Expect(st.InvalidCount).To(Equal(int32(1)))
			g.Expect(st.Invalid).To(ConsistOf(ratelimitv1alpha1.InvalidOverride{Index: 2, Key: "third",
				Message: `limit "daily" is not a limit of policy ` + ns + `/p (its limits: hourly)`}))
			g.Expect(st.ObservedGeneration).To(Equal(int64(1)))
		}).Should(Succeed())

		// Deleting the object removes its overrides: the policy's 2 again.
		Expect(k8sClient.Delete(ctx, overridesObject(ns, "tenants", "p"))).To(Succeed())
		Eventually(func(g Gomega) {
			o, err := overrides.NewRedisStore(redisClient).LoadPolicy(ctx, overrides.PolicyID{Namespace: ns, Name: "p"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(o.Declared).To(BeEmpty())
			g.Expect(checkOverrides.Override(checkReader.Policies().Get(ns, "p"), "global")).To(BeNil())
		}, time.Second, 10*time.Millisecond).Should(Succeed())
		Expect(checkStatus(ns, "/")).NotTo(Equal(http.StatusOK))
	})

	It("reports a missing policy, and applies once the policy exists", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, overridesObject(ns, "tenants", "later", overrideEntry("global", "hourly", 5)))).To(Succeed())
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "tenants")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonPolicyNotFound))
			g.Expect(st.Applied).To(BeZero())
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, globalPolicy(ns, "later", 1))).To(Succeed())
		eventuallyEnforced(ns, "later", 1)
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "tenants")
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonApplied))
			g.Expect(st.Applied).To(Equal(int32(1)))
		}).Should(Succeed())
		Eventually(func() int { return allowedUntilDenied(ns) }).Should(Equal(5))
	})
})
