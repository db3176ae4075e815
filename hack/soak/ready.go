package main

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// waitReady waits until the policy is Ready at a generation above after.
func waitReady(ctx context.Context, k client.Client, name string, after int64, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		var p ratelimitv1alpha1.RateLimitPolicy
		err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
		if err == nil && p.Generation > after && p.Status.ObservedGeneration == p.Generation &&
			apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionReady) {
			return p.Generation, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("policy %s not Ready within %s (err %v, status %+v)", name, timeout, err, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
