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

// overridesStalled asserts that the object's current generation is
// Stalled (and not Ready, not Reconciling) for field, and returns its status.
func overridesStalled(g Gomega, namespace, name, field string) ratelimitv1alpha1.RateLimitOverridesStatus {
	var o ratelimitv1alpha1.RateLimitOverrides
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &o)).To(Succeed())
	g.Expect(o.Status.ObservedGeneration).To(Equal(o.Generation))
	ready := apimeta.FindStatusCondition(o.Status.Conditions, ratelimitv1alpha1.ConditionReady)
	stalled := apimeta.FindStatusCondition(o.Status.Conditions, ratelimitv1alpha1.ConditionStalled)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(stalled).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(stalled.Reason).To(Equal(ratelimitv1alpha1.ReasonInvalidOverrides))
	g.Expect(stalled.Message).To(HavePrefix(field + ": "))
	g.Expect(stalled.ObservedGeneration).To(Equal(o.Generation))
	g.Expect(apimeta.FindStatusCondition(o.Status.Conditions, ratelimitv1alpha1.ConditionReconciling)).To(BeNil())
	return o.Status
}

// declared returns the policy's declared overrides in the store.
func declared(namespace, policy string) map[string]overrides.Entry {
	o, err := overrides.NewRedisStore(redisClient).LoadPolicy(ctx, overrides.PolicyID{Namespace: namespace, Name: policy})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return o.Declared
}

var _ = Describe("RateLimitOverrides", func() {
	It("stalls an object with an entry that cannot work, naming the field, and applies it once fixed", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "p", 2))).To(Succeed())
		eventuallyEnforced(ns, "p", 1)
		Expect(allowedUntilDenied(ns)).To(Equal(2))

		tenants := overridesObject(ns, "tenants", "p",
			overrideEntry("other", "hourly", 7),
			overrideEntry("global", "hourly", 6),
			overrideEntry("third", "daily", 3))
		Expect(k8sClient.Create(ctx, tenants)).To(Succeed())
		Eventually(func(g Gomega) {
			st := overridesStalled(g, ns, "tenants", "spec.overrides[2].limits[0].name")
			g.Expect(st.Applied).To(BeZero())
			g.Expect(st.InvalidCount).To(Equal(int32(1)))
			g.Expect(st.Invalid).To(ConsistOf(ratelimitv1alpha1.InvalidOverride{Index: 2, Key: "third",
				Message: `spec.overrides[2].limits[0].name: limit "daily" is not a limit of policy ` + ns + `/p (its limits: hourly)`}))
		}).Should(Succeed())
		// The status is written after the store: none of the new entries is declared.
		Expect(declared(ns, "p")).To(BeEmpty())

		// Fixed: the valid entries apply within a second.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(tenants), tenants)).To(Succeed())
		tenants.Spec.Overrides = tenants.Spec.Overrides[:2]
		fixed := time.Now()
		Expect(k8sClient.Update(ctx, tenants)).To(Succeed())
		Eventually(func() int64 {
			if o := checkOverrides.Override(checkReader.Policies().Get(ns, "p"), "global"); o != nil {
				return o.Quotas["hourly"]
			}
			return 0
		}, 5*time.Second, 10*time.Millisecond).Should(Equal(int64(6)))
		Expect(time.Since(fixed)).To(BeNumerically("<", time.Second))
		Expect(allowedUntilDenied(ns)).To(Equal(4)) // 2 used of the override's 6
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "tenants")
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonApplied))
			g.Expect(st.Conditions).To(HaveLen(1)) // Ready alone: neither Stalled nor Reconciling
			g.Expect(st.Applied).To(Equal(int32(2)))
			g.Expect(st.Invalid).To(BeEmpty())
			g.Expect(st.ObservedGeneration).To(Equal(int64(2)))
		}).Should(Succeed())

		// Deleting the object removes its overrides: the policy's 2 again.
		Expect(k8sClient.Delete(ctx, overridesObject(ns, "tenants", "p"))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(declared(ns, "p")).To(BeEmpty())
			g.Expect(checkOverrides.Override(checkReader.Policies().Get(ns, "p"), "global")).To(BeNil())
		}, time.Second, 10*time.Millisecond).Should(Succeed())
		Expect(checkStatus(ns, "/")).NotTo(Equal(http.StatusOK))
	})

	It("keeps an object's entries in force while its new spec is stalled", func() {
		ns := newNamespace()
		pol := globalPolicy(ns, "p", 10)
		pol.Spec.Cost = 2
		Expect(k8sClient.Create(ctx, pol)).To(Succeed())
		eventuallyEnforced(ns, "p", 1)
		tenants := overridesObject(ns, "tenants", "p", overrideEntry("global", "hourly", 6), overrideEntry("acme", "hourly", 8))
		Expect(k8sClient.Create(ctx, tenants)).To(Succeed())
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "tenants")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonApplied))
			g.Expect(st.Applied).To(Equal(int32(2)))
		}).Should(Succeed())

		// A number below the policy's cost cannot work: the new numbers of
		// the same spec do not apply either, the old ones stay.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(tenants), tenants)).To(Succeed())
		tenants.Spec.Overrides = []ratelimitv1alpha1.Override{overrideEntry("global", "hourly", 9), overrideEntry("globex", "hourly", 1)}
		Expect(k8sClient.Update(ctx, tenants)).To(Succeed())
		Eventually(func(g Gomega) {
			st := overridesStalled(g, ns, "tenants", "spec.overrides[1].limits[0].limit")
			g.Expect(st.ObservedGeneration).To(Equal(int64(2)))
			g.Expect(st.Applied).To(Equal(int32(2)))
			g.Expect(apimeta.FindStatusCondition(st.Conditions, ratelimitv1alpha1.ConditionReady).Message).To(ContainSubstring("the last good entries stay in force (2)"))
		}).Should(Succeed())
		in := declared(ns, "p")
		Expect(in).To(HaveLen(2))
		Expect(in["global"].Limits).To(Equal(map[string]int64{"hourly": 6}))
		Expect(in["acme"].Limits).To(Equal(map[string]int64{"hourly": 8}))

		// Another object's spec beats a stalled object's entries in force:
		// the key is no longer the stalled object's.
		Expect(k8sClient.Create(ctx, overridesObject(ns, "z-more", "p", overrideEntry("acme", "hourly", 4)))).To(Succeed())
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "z-more")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonApplied))
			g.Expect(st.Applied).To(Equal(int32(1)))
			g.Expect(overridesStalled(g, ns, "tenants", "spec.overrides[1].limits[0].limit").Applied).To(Equal(int32(1)))
		}).Should(Succeed())
		Expect(declared(ns, "p")["acme"].Limits).To(Equal(map[string]int64{"hourly": 4}))

		// A key another object's spec gives already cannot work either.
		Expect(k8sClient.Create(ctx, overridesObject(ns, "z-dup", "p", overrideEntry("global", "hourly", 5)))).To(Succeed())
		Eventually(func(g Gomega) {
			st := overridesStalled(g, ns, "z-dup", "spec.overrides[0].key")
			g.Expect(st.Applied).To(BeZero())
			g.Expect(st.Invalid[0].Message).To(ContainSubstring("RateLimitOverrides tenants (entry 0)"))
		}).Should(Succeed())
		Expect(declared(ns, "p")["global"].Limits).To(Equal(map[string]int64{"hourly": 6}))

		// An entry whose expiry has passed did what it was written for: it
		// is listed, and does not stall.
		past := metav1.NewTime(time.Now().Add(-time.Hour))
		gone := overrideEntry("gone", "hourly", 4)
		gone.Expires = &past
		Expect(k8sClient.Create(ctx, overridesObject(ns, "expired", "p", gone, overrideEntry("initech", "hourly", 4)))).To(Succeed())
		Eventually(func(g Gomega) {
			ready, st := overridesReady(g, ns, "expired")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonPartiallyApplied))
			g.Expect(apimeta.FindStatusCondition(st.Conditions, ratelimitv1alpha1.ConditionStalled)).To(BeNil())
			g.Expect(st.Applied).To(Equal(int32(1)))
			g.Expect(st.Invalid).To(HaveLen(1))
			g.Expect(st.Invalid[0].Message).To(HavePrefix("spec.overrides[0].expires: "))
		}).Should(Succeed())
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
