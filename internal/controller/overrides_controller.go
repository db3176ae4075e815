package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
)

// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitoverrides,verbs=get;list;watch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitoverrides/status,verbs=get;update;patch

// maxInvalidReported bounds status.invalid (the schema's MaxItems).
const maxInvalidReported = 100

// OverridesReconciler keeps each policy's declared overrides in the store
// equal to the valid entries of the RateLimitOverrides objects that name
// it, and reports in each object's status what applies and what does not.
// It reconciles per policy (namespace and policyName): a policy's objects
// are checked together, as they share its keys and its bound.
type OverridesReconciler struct {
	Client client.Client
	Store  overrides.Store
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// SetupWithManager registers the reconciler: a RateLimitOverrides object's
// changes and a policy's reconcile the policy's overrides.
func (r *OverridesReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitoverrides").
		Watches(&ratelimitv1alpha1.RateLimitOverrides{}, handler.EnqueueRequestsFromMapFunc(overridesPolicy),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&ratelimitv1alpha1.RateLimitPolicy{}, &handler.EnqueueRequestForObject{},
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
		}).
		Complete(r)
}

// overridesPolicy maps a RateLimitOverrides object to its policy.
func overridesPolicy(_ context.Context, obj client.Object) []reconcile.Request {
	o, ok := obj.(*ratelimitv1alpha1.RateLimitOverrides)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Spec.PolicyName}}}
}

// Reconcile brings the declared overrides of the policy req names, and
// the status of its RateLimitOverrides objects, in line with the objects.
func (r *OverridesReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var list ratelimitv1alpha1.RateLimitOverridesList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the RateLimitOverrides of namespace %s: %w", req.Namespace, err)
	}
	var objects []*ratelimitv1alpha1.RateLimitOverrides
	for i := range list.Items {
		if o := &list.Items[i]; o.Spec.PolicyName == req.Name && o.DeletionTimestamp.IsZero() {
			objects = append(objects, o)
		}
	}
	id := overrides.PolicyID{Namespace: req.Namespace, Name: req.Name}
	p, missing, err := r.policy(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	bases := make([]*ratelimitv1alpha1.RateLimitOverrides, len(objects))
	for i, o := range objects {
		bases[i] = o.DeepCopy()
	}
	result, err := r.apply(ctx, id, p, missing, objects)
	return result, errors.Join(err, r.patchStatuses(ctx, bases, objects))
}

// policy compiles the policy named key; missing says why there is none.
func (r *OverridesReconciler) policy(ctx context.Context, key types.NamespacedName) (*policy.Policy, string, error) {
	var rlp ratelimitv1alpha1.RateLimitPolicy
	if err := r.Client.Get(ctx, key, &rlp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("RateLimitPolicy %s does not exist; the entries apply once it does", key), nil
		}
		return nil, "", err
	}
	p, err := policy.Compile(rlp.Namespace, rlp.Name, &rlp.Spec)
	if err != nil {
		return nil, fmt.Sprintf("RateLimitPolicy %s does not compile, so its limits are not known: %v", key, err), nil
	}
	return p, "", nil
}

// apply writes the valid entries to the store and sets each object's
// status; an entry that expires later is reconciled again at its expiry.
func (r *OverridesReconciler) apply(ctx context.Context, id overrides.PolicyID, p *policy.Policy, missing string, objects []*ratelimitv1alpha1.RateLimitOverrides) (ctrl.Result, error) {
	if p == nil {
		for _, o := range objects {
			r.report(o, 0, nil, metav1.ConditionFalse, ratelimitv1alpha1.ReasonPolicyNotFound, missing)
		}
		if err := r.Store.ReplaceDeclared(ctx, id, nil); err != nil {
			return ctrl.Result{}, fmt.Errorf("remove the declared overrides of %s: %w", id, err)
		}
		return ctrl.Result{}, nil
	}
	now := r.now()
	valid, invalid := overrides.Declare(p, objects, now)
	if err := r.Store.ReplaceDeclared(ctx, id, valid); err != nil {
		for _, o := range objects {
			setCondition(o, ratelimitv1alpha1.ConditionReady, metav1.ConditionFalse, ratelimitv1alpha1.ReasonRedisUnavailable, truncate(err.Error(), 30000))
			setCondition(o, ratelimitv1alpha1.ConditionReconciling, metav1.ConditionTrue, ratelimitv1alpha1.ReasonRedisUnavailable, "waiting for Redis")
		}
		return ctrl.Result{}, err
	}
	var next time.Time
	applied := map[string]int32{}
	for _, e := range valid {
		applied[e.Object]++
		if e.Expires != nil && (next.IsZero() || e.Expires.Before(next)) {
			next = *e.Expires
		}
	}
	for _, o := range objects {
		var mine []overrides.Invalid
		for _, bad := range invalid {
			if bad.Object == o.Name {
				mine = append(mine, bad)
			}
		}
		reason, msg := ratelimitv1alpha1.ReasonApplied, fmt.Sprintf("%d entries in force", applied[o.Name])
		if len(mine) > 0 {
			reason, msg = ratelimitv1alpha1.ReasonPartiallyApplied, fmt.Sprintf("%d entries in force; %d invalid (status.invalid)", applied[o.Name], len(mine))
		}
		r.report(o, applied[o.Name], mine, metav1.ConditionTrue, reason, msg)
	}
	logf.FromContext(ctx).V(1).Info("declared overrides applied", "policy", id.String(), "valid", len(valid), "invalid", len(invalid))
	if next.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: next.Sub(now) + time.Second}, nil
}

// report sets o's status: what applies, what does not, and Ready.
func (r *OverridesReconciler) report(o *ratelimitv1alpha1.RateLimitOverrides, applied int32, invalid []overrides.Invalid, ready metav1.ConditionStatus, reason, msg string) {
	o.Status.ObservedGeneration = o.Generation
	o.Status.Applied = applied
	o.Status.InvalidCount = int32(len(invalid)) //nolint:gosec // at most the schema's 10,000 entries
	o.Status.Invalid = nil
	for _, bad := range invalid[:min(len(invalid), maxInvalidReported)] {
		o.Status.Invalid = append(o.Status.Invalid, ratelimitv1alpha1.InvalidOverride{
			Index: int32(bad.Index), Key: bad.Key, Message: truncate(bad.Message, 1024)}) //nolint:gosec // an index of at most 10,000 entries
	}
	setCondition(o, ratelimitv1alpha1.ConditionReady, ready, reason, truncate(msg, 30000))
	apimeta.RemoveStatusCondition(&o.Status.Conditions, ratelimitv1alpha1.ConditionReconciling)
}

// patchStatuses patches the status of each object that changed.
func (r *OverridesReconciler) patchStatuses(ctx context.Context, bases, objects []*ratelimitv1alpha1.RateLimitOverrides) error {
	var errs []error
	for i, o := range objects {
		if equality.Semantic.DeepEqual(bases[i].Status, o.Status) {
			continue
		}
		if err := r.Client.Status().Patch(ctx, o, client.MergeFrom(bases[i])); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("patch the status of RateLimitOverrides %s/%s: %w", o.Namespace, o.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *OverridesReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
