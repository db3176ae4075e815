package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// declare checks objects against p (overrides.DeclareKeepingLastGood),
// reading the entries in force from the store when an object stalls.
func (r *OverridesReconciler) declare(ctx context.Context, id overrides.PolicyID, p *policy.Policy, objects []*ratelimitv1alpha1.RateLimitOverrides, now time.Time) (overrides.Declaration, error) {
	return overrides.DeclareKeepingLastGood(p, objects, now, func() (map[string]overrides.Entry, error) {
		inForce, err := r.Store.LoadPolicy(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("read the overrides in force of %s: %w", id, err)
		}
		return inForce.Declared, nil
	})
}

// apply writes the entries in force to the store and sets each object's
// status; an entry that expires later is reconciled again at its expiry.
func (r *OverridesReconciler) apply(ctx context.Context, id overrides.PolicyID, p *policy.Policy, missing string, objects []*ratelimitv1alpha1.RateLimitOverrides) (ctrl.Result, error) {
	if p == nil {
		for _, o := range objects {
			report(o, 0, nil)
			markWaiting(o, &o.Status.ObservedGeneration, ratelimitv1alpha1.ReasonPolicyNotFound, missing)
		}
		if err := r.Store.ReplaceDeclared(ctx, id, nil); err != nil {
			return ctrl.Result{}, fmt.Errorf("remove the declared overrides of %s: %w", id, err)
		}
		return ctrl.Result{}, nil
	}
	now := r.now()
	d, err := r.declare(ctx, id, p, objects, now)
	if err == nil {
		err = r.Store.ReplaceDeclared(ctx, id, d.Entries)
	}
	if err != nil {
		for _, o := range objects {
			markReconciling(o, ratelimitv1alpha1.ReasonRedisUnavailable, "Redis: "+err.Error()+"; retrying")
		}
		return ctrl.Result{}, err
	}
	var next time.Time
	applied := map[string]int32{}
	for _, e := range d.Entries {
		applied[e.Object]++
		if e.Expires != nil && (next.IsZero() || e.Expires.Before(next)) {
			next = *e.Expires
		}
	}
	for _, o := range objects {
		report(o, applied[o.Name], d.Invalid[o.Name])
		setOverridesConditions(o, applied[o.Name], d.Invalid[o.Name], d.Stalled[o.Name])
	}
	logf.FromContext(ctx).V(1).Info("declared overrides applied", "policy", id.String(), "entries", len(d.Entries), "stalled", len(d.Stalled))
	if next.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: next.Sub(now) + time.Second}, nil
}

// setOverridesConditions sets o's conditions: Stalled, naming the first
// field at fault, when its spec cannot work; else Ready, partially when
// some entries have expired.
func setOverridesConditions(o *ratelimitv1alpha1.RateLimitOverrides, applied int32, invalid []overrides.Invalid, stalled bool) {
	if stalled {
		first := invalid[slices.IndexFunc(invalid, func(bad overrides.Invalid) bool { return !bad.Expired })]
		msg := fmt.Sprintf("%s: %s; %d entries cannot work as written (status.invalid)", first.Field, first.Message, len(invalid))
		if applied > 0 {
			msg += fmt.Sprintf("; the last good entries stay in force (%d)", applied)
		}
		markStalled(o, &o.Status.ObservedGeneration, ratelimitv1alpha1.ReasonInvalidOverrides, msg)
		return
	}
	if len(invalid) > 0 {
		markReady(o, &o.Status.ObservedGeneration, ratelimitv1alpha1.ReasonPartiallyApplied,
			fmt.Sprintf("%d entries in force; %d expired (status.invalid)", applied, len(invalid)))
		return
	}
	markReady(o, &o.Status.ObservedGeneration, ratelimitv1alpha1.ReasonApplied, fmt.Sprintf("%d entries in force", applied))
}

// report sets what of o applies and what does not, each entry not applied
// with its field.
func report(o *ratelimitv1alpha1.RateLimitOverrides, applied int32, invalid []overrides.Invalid) {
	o.Status.Applied = applied
	o.Status.InvalidCount = int32(len(invalid)) //nolint:gosec // at most the schema's 10,000 entries
	o.Status.Invalid = nil
	for _, bad := range invalid[:min(len(invalid), maxInvalidReported)] {
		o.Status.Invalid = append(o.Status.Invalid, ratelimitv1alpha1.InvalidOverride{
			Index: int32(bad.Index), Key: bad.Key, Message: truncate(bad.Field+": "+bad.Message, 1024)}) //nolint:gosec // an index of at most 10,000 entries
	}
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
