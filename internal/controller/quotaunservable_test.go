package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

var _ = Describe("QuotaUnservable", func() {
	It("says which descriptor policies the quota service answers by their failure mode, applies them all, and clears when the policy becomes servable", func() {
		ns := newNamespace()
		servable := limitsPolicy(ns, "servable", 1, descriptorMatch("edge", "tenant"))
		costly := limitsPolicy(ns, "costly", 1, descriptorMatch("edge", "tenant"))
		costly.Spec.Cost = 2
		costly.Spec.FailureMode = ratelimitv1alpha1.FailureModeClosed
		http := limitsPolicy(ns, "http", 1, ratelimitv1alpha1.RequestMatch{})
		http.Spec.Cost = 2
		for _, p := range []*ratelimitv1alpha1.RateLimitPolicy{servable, costly, http} {
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
		}
		quota := func(name string) func(Gomega) *metav1.Condition {
			return func(g Gomega) *metav1.Condition {
				var p ratelimitv1alpha1.RateLimitPolicy
				g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p)).To(Succeed())
				g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
				g.Expect(kstatus(&p)).To(Equal(status.CurrentStatus), "in force: %s", name)
				return condition(&p, ratelimitv1alpha1.ConditionQuotaUnservable)
			}
		}
		Eventually(func(g Gomega) {
			c := quota("costly")(g)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(ratelimitv1alpha1.ReasonFailureModeAnswers))
			g.Expect(c.Message).To(ContainSubstring("deny all (failureMode Closed): a cost other than 1"))
			g.Expect(quota("servable")(g)).To(BeNil())
			g.Expect(quota("http")(g)).To(BeNil(), "an HTTP policy is no quota service's")
		}, 60*time.Second, 250*time.Millisecond).Should(Succeed())

		By("a cost of 1: servable, the condition goes")
		Eventually(func(g Gomega) {
			var p ratelimitv1alpha1.RateLimitPolicy
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "costly"}, &p)).To(Succeed())
			p.Spec.Cost = 1
			g.Expect(k8sClient.Update(ctx, &p)).To(Succeed())
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(quota("costly")(g)).To(BeNil())
		}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
	})
})
