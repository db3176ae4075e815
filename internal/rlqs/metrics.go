package rlqs

import "github.com/prometheus/client_golang/prometheus"

// metrics are the quota service's own; the store calls it makes are the
// checker's (sluice_decisions_total and the rest).
type metrics struct {
	streams     prometheus.Gauge
	buckets     prometheus.Gauge
	reports     *prometheus.CounterVec
	assignments *prometheus.CounterVec
	overCap     prometheus.Counter
	unservable  *prometheus.CounterVec
}

// Labels of sluice_rlqs_usage_reports_total's result.
const (
	reportCharged  = "charged"   // settled in the limits' state
	reportNoPolicy = "no_policy" // the bucket matches no policy
	reportUnbound  = "unbound"   // the stream's domain is bound to no namespace
	reportOverCap  = "over_cap"  // a new bucket past the stream's cap
	reportDeferred = "deferred"  // the store could not answer: settled later
)

// Labels of sluice_rlqs_assignments_total's action.
const (
	actionTokenBucket = "token_bucket"
	actionAllowAll    = "allow_all"
	actionDenyAll     = "deny_all"
	actionAbandon     = "abandon" // idle: Envoy forgets the bucket
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rlqs_streams_open",
			Help: "Rate limit quota service streams open (one per Envoy client of this process).",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rlqs_buckets",
			Help: "Buckets the open streams hold state for (each stream's at most its cap).",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_usage_reports_total",
			Help: "Bucket usage reports received, by result (charged, no_policy, unbound, over_cap, deferred: the store could not answer).",
		}, []string{"result"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_assignments_total",
			Help: "Bucket assignments sent, by action (token_bucket, allow_all, deny_all, abandon: a bucket without a request for a minute, which Envoy forgets).",
		}, []string{"action"}),
		overCap: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rlqs_buckets_over_cap_total",
			Help: "Reports of buckets refused state because their stream held its cap of buckets (each report of such a bucket counts); their policies' failure mode answers them.",
		}),
		unservable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_unservable_total",
			Help: "Bucket reports that met a policy the quota service cannot serve as token buckets, answered by its failureMode as a blanket rule.",
		}, []string{"namespace", "policy"}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.buckets, m.reports, m.assignments, m.overCap, m.unservable)
	}
	return m
}
