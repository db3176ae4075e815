package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
	"github.com/sluice-dev/sluice/webhook"
)

// propagate changes one policy's limit o.changes times, one change at a
// time, each a different policy, and times each from its update until
// every check process answers a dry run with the new limit.
func propagate(ctx context.Context, c *cluster, o options) ([]time.Duration, error) {
	var out []time.Duration
	for j := range o.changes {
		ns, i := namespaceName(j*37%o.namespaces), j*13%o.perNamespace
		limit := int64(1_000_000 + j)
		var start time.Time
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p ratelimitv1alpha1.RateLimitPolicy
			if err := c.kube.Get(ctx, types.NamespacedName{Namespace: ns, Name: policyName(i)}, &p); err != nil {
				return err
			}
			p.Spec.Limits[0].FixedWindow.Limit = ratelimitv1alpha1.Count(limit)
			start = time.Now()
			return c.kube.Update(ctx, &p)
		})
		if err != nil {
			return out, fmt.Errorf("change %s/%s: %w", ns, policyName(i), err)
		}
		took, err := c.untilServed(ctx, ns, policyPath(i), limit, start)
		if err != nil {
			return out, err
		}
		out = append(out, took)
	}
	return out, nil
}

// untilServed waits until every check process answers a dry run on path
// in namespace ns with limit, and returns the time from start until the
// last one did.
func (c *cluster) untilServed(ctx context.Context, ns, path string, limit int64, start time.Time) (time.Duration, error) {
	var wg sync.WaitGroup
	took := make([]time.Duration, len(c.checks))
	errs := make([]error, len(c.checks))
	for k, r := range c.checks {
		wg.Go(func() {
			cc := systest.NewCheckClient(r.addr, ns)
			deadline := start.Add(30 * time.Second)
			for {
				answer, err := cc.Ask(path, "bench", true)
				if err == nil && servesLimit(answer.Policies, limit) {
					took[k] = time.Since(start)
					return
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					errs[k] = fmt.Errorf("%s: %s in %s not served with the limit %d after 30s (last error %v, log %s)", r.proc.Name, path, ns, limit, err, r.proc.Log)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return slices.Max(took), nil
}

func servesLimit(policies []webhook.PolicyReport, limit int64) bool {
	for _, p := range policies {
		for _, l := range p.Limits {
			if l.Limit == limit {
				return true
			}
		}
	}
	return false
}

// percentile is the p-th percentile of durations (nearest rank).
func percentile(durations []time.Duration, p int) time.Duration {
	if len(durations) == 0 {
		return 0
	}
	s := slices.Clone(durations)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1].Round(time.Millisecond)
}
