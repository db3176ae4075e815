package controller

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// The kstatus conditions of both reconcilers' objects (RateLimitPolicy
// and RateLimitOverrides) are set here alone, so that they hold together
// whoever sets them: Ready is always present; Reconciling and Stalled are
// present only while true and never both; status.observedGeneration moves
// to the generation only once its outcome is known (in force, stalled or
// waiting for another object), not while it is still being applied.

// conditioned is an object of the API group with status conditions.
type conditioned interface {
	GetGeneration() int64
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// maxConditionMessage bounds a condition's message (the API's 32 KiB).
const maxConditionMessage = 30000

// markReady: the generation is in force. Ready=True; no Reconciling, no
// Stalled. observed is the object's status.observedGeneration.
func markReady(o conditioned, observed *int64, reason, msg string) {
	*observed = o.GetGeneration()
	setCondition(o, ratelimitv1alpha1.ConditionReady, metav1.ConditionTrue, reason, msg)
	removeConditions(o, ratelimitv1alpha1.ConditionReconciling, ratelimitv1alpha1.ConditionStalled)
}

// markStalled: the generation cannot work until a person changes it; msg
// names the field at fault. Ready=False and Stalled=True; no Reconciling.
func markStalled(o conditioned, observed *int64, reason, msg string) {
	*observed = o.GetGeneration()
	setCondition(o, ratelimitv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(o, ratelimitv1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	removeConditions(o, ratelimitv1alpha1.ConditionReconciling)
}

// markWaiting: the generation is understood but waits for another object
// (a policy or a route that does not exist yet) and applies once it
// exists, with no retry meanwhile. Ready=False; neither Reconciling nor
// Stalled.
func markWaiting(o conditioned, observed *int64, reason, msg string) {
	*observed = o.GetGeneration()
	setCondition(o, ratelimitv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	removeConditions(o, ratelimitv1alpha1.ConditionReconciling, ratelimitv1alpha1.ConditionStalled)
}

// markReconciling: the generation is being applied and will be retried (a
// transient failure). Ready=False and Reconciling=True; no Stalled; the
// generation's outcome is not known, so observedGeneration stays.
func markReconciling(o conditioned, reason, msg string) {
	setCondition(o, ratelimitv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(o, ratelimitv1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
	removeConditions(o, ratelimitv1alpha1.ConditionStalled)
}

// setCondition sets one condition of o for its generation.
func setCondition(o conditioned, typ string, status metav1.ConditionStatus, reason, msg string) {
	conds := o.GetConditions()
	apimeta.SetStatusCondition(&conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: truncate(msg, maxConditionMessage), ObservedGeneration: o.GetGeneration(),
	})
	o.SetConditions(conds)
}

func removeConditions(o conditioned, types ...string) {
	conds := o.GetConditions()
	for _, t := range types {
		apimeta.RemoveStatusCondition(&conds, t)
	}
	o.SetConditions(conds)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
