package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	ready := map[string]bool{}
	w, err := c.watchReady(ctx, ready)
	if err != nil {
		return applied{}, err
	}
	defer func() { w.Stop() }()

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
	timeout := time.After(10 * time.Minute)
	for len(ready) < total {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok { // the API server ends watches: list, and watch on from there
				if w, err = c.watchReady(ctx, ready); err != nil {
					return out, err
				}
				continue
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

// watchReady records in ready the policies Ready now and watches for
// more from there.
func (c *cluster) watchReady(ctx context.Context, ready map[string]bool) (watch.Interface, error) {
	var list ratelimitv1alpha1.RateLimitPolicyList
	if err := c.kube.List(ctx, &list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if p := &list.Items[i]; systest.IsReady(p) {
			ready[p.Namespace+"/"+p.Name] = true
		}
	}
	return c.kube.Watch(ctx, &ratelimitv1alpha1.RateLimitPolicyList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
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
