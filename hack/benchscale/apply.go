package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/hack/internal/procs"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// applied is how long the policies took, from the first create on.
type applied struct {
	count                     int
	created, ready, published time.Duration
}

func namespaceName(i int) string { return fmt.Sprintf("scale-%03d", i) }
func policyName(i int) string    { return fmt.Sprintf("svc-%03d", i) }

// policyPath is a path policy i of a namespace matches, and no other.
func policyPath(i int) string { return "/" + policyName(i) + "/items" }

// scalePolicy is policy i of a namespace: its own path prefix, keyed on
// the client, with a limit of n a minute.
func scalePolicy(namespace string, i int, n int64) *ratelimitv1alpha1.RateLimitPolicy {
	return systest.Policy(namespace, policyName(i), "/"+policyName(i)+"/*", ratelimitv1alpha1.FailureModeOpen,
		systest.FixedWindow("per-client", n, "1m"))
}

// applyAll creates every policy at once (o.workers creates in flight) and
// times them until each is Ready and every check process holds the table
// that has them all.
func applyAll(ctx context.Context, c *cluster, o options) (applied, error) {
	total := o.namespaces * o.perNamespace
	for n := range o.namespaces {
		if err := c.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(n)}}); err != nil {
			return applied{}, err
		}
	}
	var list ratelimitv1alpha1.RateLimitPolicyList
	w, err := c.kube.Watch(ctx, &list)
	if err != nil {
		return applied{}, err
	}
	defer w.Stop()

	start := time.Now()
	jobs := make(chan *ratelimitv1alpha1.RateLimitPolicy)
	errs := make(chan error, o.workers)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for p := range jobs {
				if err := c.kube.Create(ctx, p); err != nil {
					errs <- fmt.Errorf("create %s/%s: %w", p.Namespace, p.Name, err)
					return
				}
			}
		})
	}
	go func() {
		defer close(jobs)
		for i := range o.perNamespace {
			for n := range o.namespaces {
				select {
				case jobs <- scalePolicy(namespaceName(n), i, 1000):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	created := make(chan time.Duration, 1)
	go func() { wg.Wait(); created <- time.Since(start) }()

	out := applied{count: total}
	ready := map[string]bool{}
	timeout := time.After(10 * time.Minute)
	for len(ready) < total {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, fmt.Errorf("the watch of the policies ended with %d of %d Ready", len(ready), total)
			}
			p, isPolicy := ev.Object.(*ratelimitv1alpha1.RateLimitPolicy)
			if isPolicy && ev.Type != watch.Deleted && systest.IsReady(p) {
				ready[p.Namespace+"/"+p.Name] = true
			}
		case out.created = <-created:
		case err := <-errs:
			return out, err
		case <-timeout:
			return out, fmt.Errorf("%d of %d policies Ready after 10 minutes", len(ready), total)
		}
	}
	out.ready = time.Since(start)
	if out.created == 0 {
		out.created = <-created
	}
	revision, err := c.rdb.Get(ctx, policytable.RevisionKey).Int64()
	if err != nil {
		return out, fmt.Errorf("the table's revision: %w", err)
	}
	if err := c.waitRevision(ctx, revision, 5*time.Minute); err != nil {
		return out, err
	}
	out.published = time.Since(start)
	return out, nil
}

// waitRevision waits until every check process holds the policy table at
// revision or later: a check (a dry run) takes up the set in force, then
// sluice_policy_revision tells its revision.
func (c *cluster) waitRevision(ctx context.Context, revision int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, r := range c.checks {
		cc := systest.NewCheckClient(r.addr, namespaceName(0))
		for {
			_, _ = cc.Ask("/", "bench", true)
			got := int64(procs.Scrape("http://" + r.addr + "/metrics")["sluice_policy_revision"])
			if got >= revision {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s holds revision %d of the policy table, not %d, after %s (log %s)", r.proc.Name, got, revision, timeout, r.proc.Log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
