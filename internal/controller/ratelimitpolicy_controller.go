// Package controller reconciles RateLimitPolicies into the Redis policy
// table and keeps their status in kstatus shape. It holds no algorithm or
// Redis-protocol code: compiling is internal/policy's, writing is
// internal/policytable's.
package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Publisher is the Redis side the reconciler writes to.
type Publisher interface {
	Apply(ctx context.Context, e *policytable.Entry) (revision int64, err error)
	Remove(ctx context.Context, namespace, name string) error
}

// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=ratelimit.sluice.dev,resources=ratelimitpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Reconciler compiles each RateLimitPolicy and writes the valid ones into
// the policy table.
type Reconciler struct {
	Client         client.Client
	Publisher      Publisher
	Recorder       recorder.EventRecorder
	LibraryVersion string
	// LastGood remembers the last version of each policy that compiled, so
	// the table sync can restore it while a newer version is invalid.
	LastGood *LastGood
	// Targets resolves targetRefs from the cluster's Gateways and
	// HTTPRoutes; nil when Gateway API is not installed (a policy with
	// targetRefs then reports its targets not found).
	Targets *TargetResolver
	// LimitsBound is the most limits one check evaluates
	// (ratelimit.MaxEntries when 0): a namespace whose worst case is
	// over it has its policies report TooManyLimits.
	LimitsBound int
}

// LastGood is the last table entry of each policy, by namespace/name, that
// compiled and was written.
type LastGood = policy.LastGood[types.NamespacedName, policytable.Entry]

// NewLastGood returns an empty LastGood.
func NewLastGood() *LastGood { return policy.NewLastGood[types.NamespacedName, policytable.Entry]() }

// concurrentReconciles is how many policies are reconciled at once.
const concurrentReconciles = 8

// SetupWithManager registers the reconciler. Status-only updates (our own
// patches) do not trigger a reconcile. A policy's changes may change the
// TooManyLimits condition of the others in its namespace: those whose
// condition no longer holds are reconciled too (peersToWarn). When the
// cluster serves Gateway API, the Gateway API objects are watched too
// (watchGatewayAPI).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&ratelimitv1alpha1.RateLimitPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&ratelimitv1alpha1.RateLimitPolicy{}, handler.EnqueueRequestsFromMapFunc(r.peersToWarn),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, warningChanged)))
	if GatewayAPIInstalled(mgr.GetRESTMapper()) {
		b = r.watchGatewayAPI(mgr, b)
	}
	return b.Named("ratelimitpolicy").
		WithOptions(controller.Options{
			// Retry Redis outages from 100ms up to every 30s (the default
			// backs off to 16 minutes), so policies turn Ready soon after
			// Redis is back.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
			// A reconcile mostly waits on the API server and Redis: with
			// one at a time, thousands of policies applied at once take
			// minutes to turn Ready. One policy is still never
			// reconciled twice at once.
			MaxConcurrentReconciles: concurrentReconciles,
		}).
		Complete(r)
}

// GatewayAPIInstalled reports whether the API server serves Gateway API's
// HTTPRoutes and Gateways (v1).
func GatewayAPIInstalled(mapper apimeta.RESTMapper) bool {
	for _, kind := range []string{"HTTPRoute", "Gateway"} {
		if _, err := mapper.RESTMapping(schema.GroupKind{Group: gatewayv1.GroupName, Kind: kind}, gatewayv1.GroupVersion.Version); err != nil {
			return false
		}
	}
	return true
}

// Reconcile brings one policy's table entry and status in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	log := logf.FromContext(ctx)
	var p ratelimitv1alpha1.RateLimitPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.removed(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // no finalizer: the table entry goes when the object does
	}

	// One status patch, at the end, whatever the outcome.
	base := p.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(base.Status, p.Status) {
			return
		}
		if err := r.Client.Status().Patch(ctx, &p, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patch status: %w", err))
		}
	}()

	if err := r.warnTooManyLimits(ctx, &p); err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.resolve(ctx, &p)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("resolve targetRefs: %w", err) // the API server's: retried
	}
	p.Status.Ancestors = mergeAncestors(p.Status.Ancestors, res.Ancestors, p.Generation)
	compiled, err := policy.CompileTargeted(p.Namespace, p.Name, &p.Spec, res.Routes)
	if err != nil {
		r.stalled(&p, err)
		log.Info("policy does not compile; the last good version stays in force", "err", err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	}

	entry := policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, Spec: p.Spec, Routes: res.Routes}
	revision, err := r.Publisher.Apply(ctx, &entry)
	if err != nil {
		r.redisUnavailable(&p, err)
		return ctrl.Result{}, err // transient: retried with backoff
	}
	r.LastGood.Accept(req.NamespacedName, entry)
	r.applied(&p, compiled, revision)
	if len(res.Missing) > 0 {
		r.targetsMissing(&p, res.Missing)
	}
	return ctrl.Result{}, nil
}

// warnTooManyLimits sets TooManyLimits while a request could meet more
// limits of p and the policies it can match with than one check
// evaluates, and removes it otherwise. It neither refuses p nor touches
// Ready: how many limits a request meets depends on match and when, which
// only a request decides.
func (r *Reconciler) warnTooManyLimits(ctx context.Context, p *ratelimitv1alpha1.RateLimitPolicy) error {
	bound, err := r.namespaceBound(ctx, p.Namespace)
	if err != nil {
		return err
	}
	over, reason, msg := bound.of(p)
	if !over {
		apimeta.RemoveStatusCondition(&p.Status.Conditions, ratelimitv1alpha1.ConditionTooManyLimits)
		return nil
	}
	warned := apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionTooManyLimits)
	setCondition(p, ratelimitv1alpha1.ConditionTooManyLimits, metav1.ConditionTrue, reason, msg)
	if !warned && r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, reason, "Check", "%s", msg)
	}
	return nil
}

// namespaceBound reads the worst case of a namespace from the manager's cache.
func (r *Reconciler) namespaceBound(ctx context.Context, namespace string) (*limitsBound, error) {
	var list ratelimitv1alpha1.RateLimitPolicyList
	// Read only, so the cache's own objects rather than copies: a
	// namespace may hold a thousand policies.
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the policies of namespace %s: %w", namespace, err)
	}
	bound := r.LimitsBound
	if bound <= 0 {
		bound = ratelimit.MaxEntries
	}
	return newLimitsBound(list.Items, bound), nil
}

// peersToWarn maps an event of a policy to the policies of its namespace
// whose TooManyLimits condition disagrees with the namespace's worst case
// now: only those need a new status, so a namespace of a thousand
// policies is not reconciled whole at every change. A warning's message
// keeps the figures of its policy's last reconcile.
func (r *Reconciler) peersToWarn(ctx context.Context, obj client.Object) []reconcile.Request {
	bound, err := r.namespaceBound(ctx, obj.GetNamespace())
	if err != nil {
		logf.FromContext(ctx).Error(err, "read the worst case of a namespace after a policy change")
		return nil
	}
	var out []reconcile.Request
	for i := range bound.policies {
		p := &bound.policies[i]
		if over, _, _ := bound.of(p); over != warns(p) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out
}

// warningChanged passes a status update that adds or removes a policy's
// TooManyLimits condition: it was computed from the cache of its
// reconcile, which a peer's change may have overtaken since.
var warningChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool { return warns(e.ObjectOld) != warns(e.ObjectNew) },
}

// warns reports whether obj, a policy, has TooManyLimits=True.
func warns(obj client.Object) bool {
	p, ok := obj.(*ratelimitv1alpha1.RateLimitPolicy)
	return ok && apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionTooManyLimits)
}

// resolve resolves p's targetRefs, reporting every target not found when
// Gateway API is not installed.
func (r *Reconciler) resolve(ctx context.Context, p *ratelimitv1alpha1.RateLimitPolicy) (*Resolution, error) {
	if len(p.Spec.TargetRefs) == 0 {
		return &Resolution{}, nil
	}
	if r.Targets == nil {
		res := &Resolution{Routes: &policy.Routes{}}
		for i := range p.Spec.TargetRefs {
			res.missing(p, i, "Gateway API (gateway.networking.k8s.io/v1) is not installed in this cluster", ReasonTargetNotFound)
		}
		return res, nil
	}
	return r.Targets.Resolve(ctx, p)
}

// mergeAncestors is the new ancestor statuses, each condition keeping its
// last transition time from the old status while its status is unchanged.
func mergeAncestors(old, fresh []gatewayv1.PolicyAncestorStatus, generation int64) []gatewayv1.PolicyAncestorStatus {
	for i := range fresh {
		var conds []metav1.Condition
		for _, o := range old {
			if equality.Semantic.DeepEqual(o.AncestorRef, fresh[i].AncestorRef) {
				conds = slices.Clone(o.Conditions)
				break
			}
		}
		for _, c := range fresh[i].Conditions {
			c.ObservedGeneration = generation
			apimeta.SetStatusCondition(&conds, c)
		}
		fresh[i].Conditions = conds
	}
	return fresh
}

// targetsMissing: what was found is in force, but a target is not: Ready
// is False until it exists, naming it.
func (r *Reconciler) targetsMissing(p *ratelimitv1alpha1.RateLimitPolicy, missing []string) {
	msg := truncate(strings.Join(missing, "; ")+"; the policy applies to the targets that exist", maxConditionMessage)
	markWaiting(p, &p.Status.ObservedGeneration, ratelimitv1alpha1.ReasonTargetNotFound, msg)
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ratelimitv1alpha1.ReasonTargetNotFound, "Resolve", "%s", msg)
	}
}

func (r *Reconciler) removed(ctx context.Context, key types.NamespacedName) error {
	r.LastGood.Forget(key)
	if err := r.Publisher.Remove(ctx, key.Namespace, key.Name); err != nil {
		return fmt.Errorf("remove %s from the policy table: %w", key, err)
	}
	logf.FromContext(ctx).Info("policy deleted; removed from the policy table")
	return nil
}

// applied: Ready=True for this generation; no Reconciling, no Stalled.
func (r *Reconciler) applied(p *ratelimitv1alpha1.RateLimitPolicy, compiled *policy.Policy, revision int64) {
	wasReady := p.Status.ObservedGeneration == p.Generation && apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
	p.Status.Limits = truncate(compiled.Summary, 1024)
	p.Status.LibraryVersion = r.LibraryVersion
	p.Status.TableRevision = revision
	markReady(p, &p.Status.ObservedGeneration, ratelimitv1alpha1.ReasonApplied, fmt.Sprintf("In force: policy table revision %d", revision))
	noteQuotaUnservable(p, compiled)
	if !wasReady && r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ratelimitv1alpha1.ReasonApplied, "Apply",
			"Generation %d is in force (policy table revision %d)", p.Generation, revision)
	}
}

// noteQuotaUnservable sets QuotaUnservable on a descriptor policy the
// rate limit quota service answers by its failure mode, and removes it
// otherwise. It neither refuses the policy nor touches Ready: the same
// policy may serve the rate limit service, which decides every request.
func noteQuotaUnservable(p *ratelimitv1alpha1.RateLimitPolicy, compiled *policy.Policy) {
	why := compiled.Unservable()
	if !compiled.ForDescriptors() || why == "" {
		apimeta.RemoveStatusCondition(&p.Status.Conditions, ratelimitv1alpha1.ConditionQuotaUnservable)
		return
	}
	answer := "allow all (failureMode Open)"
	if compiled.FailClosed {
		answer = "deny all (failureMode Closed)"
	}
	setCondition(p, ratelimitv1alpha1.ConditionQuotaUnservable, metav1.ConditionTrue, ratelimitv1alpha1.ReasonFailureModeAnswers,
		fmt.Sprintf("Envoy's rate limit quota service answers this policy's buckets with %s: %s; the rate limit service decides it per request", answer, why))
}

// stalled: a person must fix the spec. Ready=False and Stalled=True, for
// this generation; the previous valid version stays in the table.
func (r *Reconciler) stalled(p *ratelimitv1alpha1.RateLimitPolicy, err error) {
	msg := truncate(err.Error(), maxConditionMessage)
	if p.Status.TableRevision > 0 {
		msg += "; the last good version stays in force"
	}
	markStalled(p, &p.Status.ObservedGeneration, ratelimitv1alpha1.ReasonInvalidSpec, msg)
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ratelimitv1alpha1.ReasonInvalidSpec, "Compile", "%s", msg)
	}
}

// redisUnavailable: transient. Ready=False and Reconciling=True; the
// generation's outcome is not known yet, so observedGeneration stays. The
// Warning event is recorded when the outage starts, not at every retry.
func (r *Reconciler) redisUnavailable(p *ratelimitv1alpha1.RateLimitPolicy, err error) {
	ready := apimeta.FindStatusCondition(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
	alreadyReported := ready != nil && ready.Reason == ratelimitv1alpha1.ReasonRedisUnavailable
	msg := truncate("Redis: "+err.Error()+"; retrying", maxConditionMessage)
	markReconciling(p, ratelimitv1alpha1.ReasonRedisUnavailable, msg)
	if r.Recorder != nil && !alreadyReported {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ratelimitv1alpha1.ReasonRedisUnavailable, "Apply", "%s", msg)
	}
}
