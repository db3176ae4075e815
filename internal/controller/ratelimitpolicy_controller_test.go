package controller_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rlp-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// globalPolicy is one global fixed-window limit: the n+1th request in an
// hour is denied.
func globalPolicy(namespace, name string, limit int64) *ratelimitv1alpha1.RateLimitPolicy {
	return &ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: ratelimitv1alpha1.RateLimitPolicySpec{
			Key: "global",
			Limits: []ratelimitv1alpha1.Limit{{
				Name:        "hourly",
				FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: ratelimitv1alpha1.Count(limit), Window: "1h"},
			}},
		},
	}
}

// checkStatus asks the check endpoint about one request to path in namespace.
func checkStatus(namespace, path string) int {
	req, err := http.NewRequest("GET", checkURL+"/check/"+namespace, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Host", "example.com")
	req.Header.Set("X-Forwarded-Uri", path)
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	return resp.StatusCode
}

// allowedUntilDenied counts requests to a fresh path-independent global
// key until one is denied.
func allowedUntilDenied(namespace string) int {
	for n := 0; n < 200; n++ {
		if checkStatus(namespace, "/") != http.StatusOK {
			return n
		}
	}
	return -1
}

// eventuallyEnforced waits until the check endpoint holds generation of
// the policy: Ready says the table has it, and the reader follows the
// table a moment later (longer after a table of hundreds of policies).
func eventuallyEnforced(ns, name string, generation int64) {
	EventuallyWithOffset(1, func() int64 {
		if p := checkReader.Policies().Get(ns, name); p != nil {
			return p.Generation
		}
		return 0
	}, 5*time.Second, 20*time.Millisecond).Should(Equal(generation))
}

func get(ns, name string) *ratelimitv1alpha1.RateLimitPolicy {
	var p ratelimitv1alpha1.RateLimitPolicy
	ExpectWithOffset(1, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
	return &p
}

func condition(p *ratelimitv1alpha1.RateLimitPolicy, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(p.Status.Conditions, typ)
}

// eventuallyStalled waits for the policy's status to say its generation
// stalls, and checks the kstatus rules on it.
func eventuallyStalled(ns, name string) *ratelimitv1alpha1.RateLimitPolicy {
	var p *ratelimitv1alpha1.RateLimitPolicy
	EventuallyWithOffset(1, func(g Gomega) {
		p = get(ns, name)
		g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		g.Expect(condition(p, ratelimitv1alpha1.ConditionStalled)).NotTo(BeNil())
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	kstatusRulesHold(p)
	return p
}

func eventuallyReady(ns, name string) *ratelimitv1alpha1.RateLimitPolicy {
	var p *ratelimitv1alpha1.RateLimitPolicy
	EventuallyWithOffset(1, func(g Gomega) {
		p = get(ns, name)
		g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		c := condition(p, ratelimitv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Ready: %+v", c)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	return p
}

func seriesCount(s *eventsv1.EventSeries) int32 {
	if s == nil {
		return 0
	}
	return s.Count
}

// kstatus computes what Flux and `kubectl wait`-style tools see.
func kstatus(p *ratelimitv1alpha1.RateLimitPolicy) status.Status {
	p = p.DeepCopy()
	p.SetGroupVersionKind(ratelimitv1alpha1.GroupVersion.WithKind("RateLimitPolicy"))
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	Expect(err).NotTo(HaveOccurred())
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	Expect(err).NotTo(HaveOccurred())
	return res.Status
}

// kstatusRulesHold checks the rules every status must follow.
func kstatusRulesHold(p *ratelimitv1alpha1.RateLimitPolicy) {
	ExpectWithOffset(1, condition(p, ratelimitv1alpha1.ConditionReady)).NotTo(BeNil(), "Ready must always be present")
	rec, stalled := condition(p, ratelimitv1alpha1.ConditionReconciling), condition(p, ratelimitv1alpha1.ConditionStalled)
	bothTrue := rec != nil && stalled != nil && rec.Status == metav1.ConditionTrue && stalled.Status == metav1.ConditionTrue
	ExpectWithOffset(1, bothTrue).To(BeFalse(), "Reconciling and Stalled must never both be true")
}

var _ = Describe("RateLimitPolicy controller", func() {
	It("writes policies into the table and the check endpoint follows creates, updates and deletes", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "api", 2))).To(Succeed())
		p := eventuallyReady(ns, "api")
		kstatusRulesHold(p)
		Expect(kstatus(p)).To(Equal(status.CurrentStatus))
		Expect(p.Status.LibraryVersion).To(Equal(redisstore.LibraryName))
		Expect(p.Status.TableRevision).To(BeNumerically(">", 0))
		Expect(p.Status.Limits).To(Equal("hourly=fixedWindow(2/1h)"))

		entry, ok, err := table.Get(ctx, ns, "api")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(entry.Generation).To(Equal(p.Generation))

		// Until the check endpoint holds the policy, every request is allowed.
		eventuallyEnforced(ns, "api", p.Generation)
		Expect(checkStatus(ns, "/")).To(Equal(http.StatusOK))
		Expect(allowedUntilDenied(ns)).To(Equal(1), "limit 2: one more request after the first")

		By("raising the limit: enforced within 1s of Ready")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := get(ns, "api")
			p.Spec.Limits[0].FixedWindow.Limit = 5
			return k8sClient.Update(ctx, p)
		})).To(Succeed())
		eventuallyReady(ns, "api")
		readyAt := time.Now()
		Eventually(func() int { return checkStatus(ns, "/") }, time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK))
		GinkgoWriter.Printf("new limit enforced %s after Ready\n", time.Since(readyAt))
		Expect(allowedUntilDenied(ns)).To(Equal(2)) // 3 of 5 used

		By("deleting it: the table entry goes and the limit is lifted")
		Expect(k8sClient.Delete(ctx, get(ns, "api"))).To(Succeed())
		Eventually(func() bool {
			_, ok, err := table.Get(ctx, ns, "api")
			return err == nil && !ok
		}, 5*time.Second, 50*time.Millisecond).Should(BeTrue())
		Eventually(func() int { return checkStatus(ns, "/") }, time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK))
		for i := 0; i < 10; i++ {
			Expect(checkStatus(ns, "/")).To(Equal(http.StatusOK))
		}
	})

	It("reports an invalid update as Stalled and keeps enforcing the last good version", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "api", 3))).To(Succeed())
		good := eventuallyReady(ns, "api")
		eventuallyEnforced(ns, "api", good.Generation)
		Expect(checkStatus(ns, "/")).To(Equal(http.StatusOK))

		// The API server accepts it (when is a string); only compiling the CEL shows the typo.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := get(ns, "api")
			p.Spec.Match.When = `request.hedaers["x-plan"] == "free"`
			p.Spec.Limits[0].FixedWindow.Limit = 100
			return k8sClient.Update(ctx, p)
		})).To(Succeed())
		p := eventuallyStalled(ns, "api")
		ready, stalled := condition(p, ratelimitv1alpha1.ConditionReady), condition(p, ratelimitv1alpha1.ConditionStalled)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(ratelimitv1alpha1.ReasonInvalidSpec))
		Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		Expect(stalled.Message).To(ContainSubstring("spec.match.when"))
		Expect(stalled.Message).To(ContainSubstring("undeclared reference"))
		Expect(stalled.Message).To(ContainSubstring("last good version stays in force"))
		Expect(kstatus(p)).To(Equal(status.FailedStatus))

		By("an Event says so")
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			found := false
			for _, e := range events.Items {
				if e.Regarding.Name == "api" && e.Reason == ratelimitv1alpha1.ReasonInvalidSpec && e.Type == corev1.EventTypeWarning {
					found = true
				}
			}
			g.Expect(found).To(BeTrue(), "no InvalidSpec warning event among %d events", len(events.Items))
		}, 5*time.Second, 100*time.Millisecond).Should(Succeed())

		By("the old limit (3) is still enforced, through table syncs")
		entry, ok, err := table.Get(ctx, ns, "api")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(entry.Generation).To(Equal(good.Generation))
		Consistently(func() int64 {
			e, _, _ := table.Get(ctx, ns, "api")
			return e.Generation
		}, 2500*time.Millisecond, 250*time.Millisecond).Should(Equal(good.Generation))
		Expect(allowedUntilDenied(ns)).To(Equal(2))

		By("fixing it makes it Ready again")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := get(ns, "api")
			p.Spec.Match.When = `request.method == "GET"`
			return k8sClient.Update(ctx, p)
		})).To(Succeed())
		p = eventuallyReady(ns, "api")
		Expect(condition(p, ratelimitv1alpha1.ConditionStalled)).To(BeNil())
		kstatusRulesHold(p)
	})

	It("refuses an unknown calendar time zone in the status, naming the field, and keeps the last good version", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "api", 3))).To(Succeed())
		good := eventuallyReady(ns, "api")
		eventuallyEnforced(ns, "api", good.Generation)

		// The schema checks the name's shape only; the zone data says it does not exist.
		calendar := func(zone ratelimitv1alpha1.TimeZone) error {
			p := get(ns, "api")
			p.Spec.Limits[0].FixedWindow = nil
			p.Spec.Limits[0].Calendar = &ratelimitv1alpha1.CalendarLimit{Limit: 100, Period: ratelimitv1alpha1.CalendarPeriodMonth, TimeZone: zone}
			return k8sClient.Update(ctx, p)
		}
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error { return calendar("Europe/Atlantis") })).To(Succeed())
		p := eventuallyStalled(ns, "api")
		ready, stalled := condition(p, ratelimitv1alpha1.ConditionReady), condition(p, ratelimitv1alpha1.ConditionStalled)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(stalled.Message).To(ContainSubstring("spec.limits[0].calendar.timeZone"))
		Expect(stalled.Message).To(ContainSubstring("Europe/Atlantis"))
		Expect(stalled.Message).To(ContainSubstring("last good version stays in force"))
		entry, ok, err := table.Get(ctx, ns, "api")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(entry.Generation).To(Equal(good.Generation))
		Expect(allowedUntilDenied(ns)).To(Equal(3), "the last good version's limit of 3")

		By("a zone that exists makes it Ready")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error { return calendar("Europe/Berlin") })).To(Succeed())
		p = eventuallyReady(ns, "api")
		Expect(p.Status.Limits).To(Equal("hourly=calendar(100/Month,Europe/Berlin)"))
	})

	It("converges after 50 concurrent spec edits", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "busy", 1))).To(Succeed())
		eventuallyReady(ns, "busy")
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer GinkgoRecover()
				// 50 writers on one object: retry until each edit lands.
				backoff := wait.Backoff{Steps: 500, Duration: 5 * time.Millisecond, Factor: 1.1, Jitter: 1, Cap: 200 * time.Millisecond}
				Expect(retry.RetryOnConflict(backoff, func() error {
					p := get(ns, "busy")
					p.Spec.Limits[0].FixedWindow.Limit = ratelimitv1alpha1.Count(100 + i)
					return k8sClient.Update(ctx, p)
				})).To(Succeed())
			}(i)
		}
		wg.Wait()
		final := get(ns, "busy")
		Expect(final.Generation).To(BeNumerically(">=", 51), "every one of the 50 edits changed the spec")
		Eventually(func(g Gomega) {
			p := get(ns, "busy")
			g.Expect(p.Status.ObservedGeneration).To(Equal(final.Generation))
			g.Expect(condition(p, ratelimitv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			e, ok, err := table.Get(ctx, ns, "busy")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(BeTrue())
			g.Expect(e.Generation).To(Equal(final.Generation))
			g.Expect(e.Spec.Limits[0].FixedWindow.Limit).To(Equal(final.Spec.Limits[0].FixedWindow.Limit))
		}, 15*time.Second, 100*time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("50 edits: generation %d, limit %d\n", final.Generation, final.Spec.Limits[0].FixedWindow.Limit)
	})

	It("restores the library and the table after FLUSHALL, without a restart", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "api", 1000))).To(Succeed())
		eventuallyReady(ns, "api")
		Expect(redisServer.Client().FlushAll(ctx).Err()).To(Succeed())
		Expect(redisServer.Client().FunctionFlush(ctx).Err()).To(Succeed())
		flushed := time.Now()
		Eventually(func(g Gomega) {
			_, ok, err := table.Get(ctx, ns, "api")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(BeTrue())
			libs, err := redisServer.Client().FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.LibraryName}).Result()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(libs).To(HaveLen(1))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("table and library restored %s after FLUSHALL\n", time.Since(flushed))
		Expect(checkStatus(ns, "/")).To(Equal(http.StatusOK))
	})

	It("reports RedisUnavailable while Redis is down and turns Ready when it is back", func() {
		ns := newNamespace()
		redisServer.Kill()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				redisServer.Restart()
			}
		})
		Expect(k8sClient.Create(ctx, globalPolicy(ns, "api", 10))).To(Succeed())
		var p *ratelimitv1alpha1.RateLimitPolicy
		Eventually(func(g Gomega) {
			p = get(ns, "api")
			c := condition(p, ratelimitv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(ratelimitv1alpha1.ReasonRedisUnavailable))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		kstatusRulesHold(p)
		Expect(condition(p, ratelimitv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		Expect(condition(p, ratelimitv1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
		Expect(kstatus(p)).To(Equal(status.InProgressStatus))

		By("one Warning event for the outage, not one per retry")
		// Repeats of one event show as its series count.
		outageEvents := func() int32 {
			var events eventsv1.EventList
			Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			var n int32
			for _, e := range events.Items {
				if e.Regarding.Name == "api" && e.Reason == ratelimitv1alpha1.ReasonRedisUnavailable && e.Type == corev1.EventTypeWarning {
					n += max(1, seriesCount(e.Series))
				}
			}
			return n
		}
		Eventually(outageEvents, 5*time.Second, 100*time.Millisecond).Should(Equal(int32(1)))
		// Retries back off from 100ms: several fall in these two seconds.
		Consistently(outageEvents, 2*time.Second, 100*time.Millisecond).Should(Equal(int32(1)))

		redisServer.Restart()
		restarted = true
		p = eventuallyReady(ns, "api")
		Expect(condition(p, ratelimitv1alpha1.ConditionReconciling)).To(BeNil())
		kstatusRulesHold(p)
		Expect(kstatus(p)).To(Equal(status.CurrentStatus))
	})
})

var _ = Describe("RateLimitPolicy controller under load", func() {
	It("makes 500 policies created at once Ready within 60s, with one table write each", func() {
		ns := newNamespace()
		hsets := func() int64 {
			stats, err := redisServer.Client().Info(ctx, "commandstats").Result()
			Expect(err).NotTo(HaveOccurred())
			for _, line := range strings.Split(stats, "\r\n") {
				if v, ok := strings.CutPrefix(line, "cmdstat_hset:calls="); ok {
					n, err := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
					Expect(err).NotTo(HaveOccurred())
					return n
				}
			}
			return 0
		}
		// The table exists (the controller's first sync may still be due
		// when this spec runs first): what follows writes only policies.
		Eventually(func() (bool, error) {
			return redisServer.Client().HExists(ctx, policytable.HashKey, policytable.MarkerField).Result()
		}, 5*time.Second, 50*time.Millisecond).Should(BeTrue())
		before := hsets()
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := 0; i < 500; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer GinkgoRecover()
				sem <- struct{}{}
				defer func() { <-sem }()
				Expect(k8sClient.Create(ctx, globalPolicy(ns, fmt.Sprintf("p-%03d", i), int64(10+i)))).To(Succeed())
			}(i)
		}
		wg.Wait()
		Eventually(func(g Gomega) {
			var list ratelimitv1alpha1.RateLimitPolicyList
			g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			ready := 0
			for i := range list.Items {
				p := &list.Items[i]
				if c := condition(p, ratelimitv1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && p.Status.ObservedGeneration == p.Generation {
					ready++
				}
			}
			g.Expect(ready).To(Equal(500))
		}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("500 policies Ready %s after the first create\n", time.Since(start))
		// Let a table sync pass: it must find nothing to write.
		time.Sleep(1500 * time.Millisecond)
		Expect(hsets()-before).To(Equal(int64(500)), "one table write per policy")
	})
})
