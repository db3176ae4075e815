package controller_test

import (
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// limitsPolicy is a policy of n hourly limits; match makes it a
// descriptor policy or narrows an HTTP one.
func limitsPolicy(namespace, name string, n int, match ratelimitv1alpha1.RequestMatch) *ratelimitv1alpha1.RateLimitPolicy {
	limits := make([]ratelimitv1alpha1.Limit, n)
	for i := range limits {
		limits[i] = ratelimitv1alpha1.Limit{
			Name:        ratelimitv1alpha1.LimitName(fmt.Sprintf("l%d", i)),
			FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: ratelimitv1alpha1.Count(100 + i), Window: "1h"},
		}
	}
	return &ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       ratelimitv1alpha1.RateLimitPolicySpec{Match: match, Limits: limits},
	}
}

func descriptorMatch(domain string, keys ...string) ratelimitv1alpha1.RequestMatch {
	m := ratelimitv1alpha1.RequestMatch{Domain: domain}
	for _, k := range keys {
		m.Descriptor = append(m.Descriptor, ratelimitv1alpha1.DescriptorEntryMatch{Key: k})
	}
	return m
}

// expectStatuses waits until ns holds exactly the policies of want, each
// Ready at its generation and in force (kstatus Current), and each with
// TooManyLimits as want says (nil: absent). It returns them by name.
func expectStatuses(ns string, want map[string]func(Gomega, *metav1.Condition)) map[string]*ratelimitv1alpha1.RateLimitPolicy {
	byName := map[string]*ratelimitv1alpha1.RateLimitPolicy{}
	EventuallyWithOffset(1, func(g Gomega) {
		var list ratelimitv1alpha1.RateLimitPolicyList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(len(want)))
		clear(byName)
		for i := range list.Items {
			p := &list.Items[i]
			byName[p.Name] = p
			check, ok := want[p.Name]
			g.Expect(ok).To(BeTrue(), "unexpected policy %s", p.Name)
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation), p.Name)
			ready := condition(p, ratelimitv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil(), p.Name)
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: Ready %+v", p.Name, ready)
			check(g, condition(p, ratelimitv1alpha1.ConditionTooManyLimits))
		}
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
	for _, p := range byName {
		kstatusRulesHold(p)
		ExpectWithOffset(1, kstatus(p)).To(Equal(status.CurrentStatus), "the warning leaves kstatus alone: %s", p.Name)
	}
	return byName
}

func noWarning(g Gomega, c *metav1.Condition) {
	g.Expect(c).To(BeNil(), "TooManyLimits")
}

func warning(reason string, figures ...string) func(Gomega, *metav1.Condition) {
	return func(g Gomega, c *metav1.Condition) {
		g.Expect(c).NotTo(BeNil(), "TooManyLimits")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(reason))
		for _, f := range figures {
			g.Expect(c.Message).To(ContainSubstring(f))
		}
	}
}

func every(names []string, check func(Gomega, *metav1.Condition)) map[string]func(Gomega, *metav1.Condition) {
	m := map[string]func(Gomega, *metav1.Condition){}
	for _, n := range names {
		m[n] = check
	}
	return m
}

var _ = Describe("TooManyLimits", func() {
	It("warns every HTTP policy of a namespace whose policies have more limits together than one check evaluates, and clears when they no longer have", func() {
		ns := newNamespace()
		var names []string
		for i := range testLimitsBound / 8 {
			names = append(names, fmt.Sprintf("p-%03d", i))
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				sem <- struct{}{}
				defer func() { <-sem }()
				Expect(k8sClient.Create(ctx, limitsPolicy(ns, name, 8, ratelimitv1alpha1.RequestMatch{}))).To(Succeed())
			}()
		}
		wg.Wait()
		By(fmt.Sprintf("%d policies of 8 limits: at the bound (%d), not over it", len(names), testLimitsBound))
		expectStatuses(ns, every(names, noWarning))

		By("one more: every policy says so")
		names = append(names, "one-too-many")
		Expect(k8sClient.Create(ctx, limitsPolicy(ns, "one-too-many", 8, ratelimitv1alpha1.RequestMatch{}))).To(Succeed())
		over := warning(ratelimitv1alpha1.ReasonHTTPPoliciesOverBound,
			fmt.Sprintf("A request to any host can match %d HTTP policies of this namespace with %d limits together (this one among them), more than the %d one check evaluates",
				len(names), 8*len(names), testLimitsBound),
			"400 too-many-limits", "this policy stays in force", "match.hosts")
		expectStatuses(ns, every(names, over))
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			found := false
			for _, e := range events.Items {
				found = found || (e.Reason == ratelimitv1alpha1.ReasonHTTPPoliciesOverBound && e.Type == corev1.EventTypeWarning)
			}
			g.Expect(found).To(BeTrue(), "no %s warning event", ratelimitv1alpha1.ReasonHTTPPoliciesOverBound)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("deleting one takes the namespace back to the bound: the condition goes from every policy")
		Expect(k8sClient.Delete(ctx, limitsPolicy(ns, names[0], 8, ratelimitv1alpha1.RequestMatch{}))).To(Succeed())
		expectStatuses(ns, every(names[1:], noWarning))
	})

	It("counts the descriptor policies one descriptor can match, 64 times, and re-reconciles only the policies whose warning changes", func() {
		ns := newNamespace()
		for _, p := range []*ratelimitv1alpha1.RateLimitPolicy{
			limitsPolicy(ns, "edge-user", 8, descriptorMatch("edge", "user")),
			limitsPolicy(ns, "edge-ip", 8, descriptorMatch("edge", "remote_address")),
			limitsPolicy(ns, "other", 8, descriptorMatch("other")),
			limitsPolicy(ns, "http", 8, ratelimitv1alpha1.RequestMatch{}),
		} {
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
		}
		By("64 × 8 limits per descriptor: under the bound; other keys and other domains never match the same descriptor")
		before := expectStatuses(ns, map[string]func(Gomega, *metav1.Condition){
			"edge-user": noWarning, "edge-ip": noWarning, "other": noWarning, "http": noWarning,
		})

		By("three more limits for the same descriptors: 64 × 11 is over it")
		Expect(k8sClient.Create(ctx, limitsPolicy(ns, "edge-user-day", 3, descriptorMatch("edge", "user")))).To(Succeed())
		over := warning(ratelimitv1alpha1.ReasonDescriptorPoliciesOverBound,
			"of domain edge carries up to 64 descriptors, and a descriptor with the keys [user] can match 2 descriptor policies of this namespace with 11 limits together",
			fmt.Sprintf("up to 64 × 11 = 704 limits in one check, more than the %d one check evaluates", testLimitsBound),
			"INVALID_ARGUMENT", "this policy stays in force")
		expectStatuses(ns, map[string]func(Gomega, *metav1.Condition){
			"edge-user": over, "edge-user-day": over, "edge-ip": noWarning, "other": noWarning, "http": noWarning,
		})
		Consistently(func(g Gomega) {
			for _, name := range []string{"edge-ip", "other", "http"} {
				g.Expect(get(ns, name).ResourceVersion).To(Equal(before[name].ResourceVersion), "%s was reconciled again though its warning did not change", name)
			}
		}, 2*time.Second, 250*time.Millisecond).Should(Succeed())

		By("deleting it takes them back under")
		Expect(k8sClient.Delete(ctx, limitsPolicy(ns, "edge-user-day", 3, descriptorMatch("edge", "user")))).To(Succeed())
		expectStatuses(ns, map[string]func(Gomega, *metav1.Condition){
			"edge-user": noWarning, "edge-ip": noWarning, "other": noWarning, "http": noWarning,
		})
	})
})
