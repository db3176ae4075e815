package check

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Metrics are the check path's Prometheus metrics.
type Metrics struct {
	decisions    *prometheus.CounterVec
	checkLatency prometheus.Histogram
	storeLatency prometheus.Histogram
	storeErrors  prometheus.Counter
	failureMode  *prometheus.CounterVec
	storeFull    prometheus.Counter
	// evictions reads the store's evictions when it evicts (the
	// in-memory store; set by New).
	evictions    atomic.Pointer[ratelimit.Evictor]
	breakerState prometheus.Gauge
	nodeBreakers *prometheus.GaugeVec // per store node (Redis Cluster master)
	cacheHits    prometheus.Counter
	revision     prometheus.Gauge
	bans         *prometheus.CounterVec
	activeBans   *prometheus.GaugeVec
	releases     *prometheus.CounterVec
	refunds      *prometheus.CounterVec
	// reservations and reservationUnits count charge Reserve's
	// reservations (see ReservationOutcome, ReservationUnits).
	reservations     *prometheus.CounterVec
	reservationUnits *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Limit evaluations by namespace, policy, limit and result (allowed, denied, shadow_denied, cached_denied, soft_over: a soft limit let the request through over it).",
		}, []string{"namespace", "policy", "limit", "result"}),
		checkLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one check, including the Redis call.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_redis_duration_seconds",
			Help:    "Time of the atomic store call of one check.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Store calls that failed or timed out.",
		}),
		failureMode: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_failure_mode_decisions_total",
			Help: "Consuming checks (decisions: not refunds, releases or dry runs) answered by a failure mode because the store could not answer: Redis unavailable, or the store full (mode: open allowed, closed denied).",
		}, []string{"mode"}),
		storeFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_full_total",
			Help: "Consuming checks answered by a failure mode because the store is full: Redis refused the call for memory (OOM: maxmemory reached with nothing to evict), or a check needs more buckets than the in-memory store holds in all; also counted in sluice_failure_mode_decisions_total, not in sluice_redis_errors_total.",
		}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 open, 2 half-open. In Redis Cluster mode the worst of the masters' breakers (sluice_breaker_node_state): 1 when any is open, else 2 when any is probing.",
		}),
		nodeBreakers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_breaker_node_state",
			Help: "Circuit breaker state per Redis Cluster master (node: its address, as the slot map names it): 0 closed, 1 open, 2 half-open. Absent outside Cluster mode; a master that no longer serves slots is dropped.",
		}, []string{"node"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_deny_cache_hits_total",
			Help: "Denials answered from the in-process cache without Redis.",
		}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_policy_revision",
			Help: "Revision of the policy set in force.",
		}),
		bans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_bans_total",
			Help: "Bans issued by policies' penalty boxes, by namespace, policy and mode (Enforce; Shadow: the bans a shadow policy would have issued, and did not). Each ban is issued by one check process: sum over processes.",
		}, []string{"namespace", "policy", "mode"}),
		activeBans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_bans_active",
			Help: "Bans in force that this check process issued, by namespace and policy, each counted until its end. Each ban is issued by exactly one process's call: the sum over every check process is the fleet's figure.",
		}, []string{"namespace", "policy"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_refunds_total",
			Help: "Limits given units back by a refund (Envoy's negative hits, on a policy without a concurrency limit), by namespace, policy and limit: not decisions, so not in sluice_decisions_total.",
		}, []string{"namespace", "policy", "limit"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_releases_total",
			Help: "Releases of a policy's concurrency limits by outcome: freed (the holder held units), nothing_held (denied, released already, timed out, or unknown: nothing freed), refused_no_release (a check met the limit through a transport that cannot release it: the HTTP auth hooks, ext_authz).",
		}, []string{"namespace", "policy", "outcome"}),
	}
	m.reservations, m.reservationUnits = reservationMetrics()
	evictions := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_evictions_total",
		Help: "Buckets with live state the in-memory store evicted, least recently used first, to make room for new ones while it holds its maximum (--memory-max-keys); an evicted bucket starts afresh. Redis counts its own evictions (INFO stats evicted_keys).",
	}, m.evicted)
	// Both modes are exported from the start, at 0, so that rate() in an
	// alert sees the first answer by a failure mode.
	for _, mode := range []string{"open", "closed"} {
		m.failureMode.WithLabelValues(mode)
	}
	reg.MustRegister(m.decisions, m.checkLatency, m.storeLatency, m.storeErrors, m.failureMode, m.storeFull, evictions, m.breakerState, m.nodeBreakers, m.cacheHits, m.revision,
		m.bans, m.activeBans, m.releases, m.refunds, m.reservations, m.reservationUnits)
	return m
}

// banIssued counts a ban of length d that a check of policy p issued (a
// shadow policy's: would have), and an enforced one as active until its
// end (timed from now: the store decided a little later, so the gauge
// may drop a ban a call's latency early).
func (m *Metrics) banIssued(p *policy.Policy, d time.Duration) {
	if p.Shadow {
		m.bans.WithLabelValues(p.Namespace, p.Name, string(ratelimitv1alpha1.ModeShadow)).Inc()
		return
	}
	m.bans.WithLabelValues(p.Namespace, p.Name, string(ratelimitv1alpha1.ModeEnforce)).Inc()
	active := m.activeBans.WithLabelValues(p.Namespace, p.Name)
	active.Inc()
	time.AfterFunc(d, active.Dec)
}

func (m *Metrics) evicted() float64 {
	if ev := m.evictions.Load(); ev != nil {
		return float64((*ev).Evictions())
	}
	return 0
}
