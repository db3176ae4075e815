package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

// Reasons of the table sync's Warning events.
const (
	// ReasonEvictionRisk: a Redis master may evict keys without a TTL when
	// full (an allkeys-* maxmemory-policy), the policy table among them.
	ReasonEvictionRisk = "EvictionRisk"
	// ReasonTableRestored: the policy was missing from the table in Redis
	// (evicted, flushed, or lost in a failover) and was written back.
	ReasonTableRestored = "PolicyTableRestored"
)

// Controller metrics of the table sync, served with controller-runtime's.
var (
	evictionUnsafe = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_redis_table_evictable",
		Help: "1 when a Redis master has an allkeys-* maxmemory-policy with a maxmemory, so it may evict the policy table; 0 when it cannot; -1 when unknown (the controller's Redis user may not run INFO, or Redis did not answer).",
	})
	tableRestored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_policy_table_restored_total",
		Help: "Policy table entries the table sync found missing in Redis (evicted, flushed, lost in a failover) and wrote back.",
	})
)

func init() {
	evictionUnsafe.Set(-1)
	crmetrics.Registry.MustRegister(evictionUnsafe, tableRestored)
}

// Syncer is the Redis side of the table sync (policytable.Publisher).
type Syncer interface {
	Mark() policytable.Mark
	Sync(ctx context.Context, since policytable.Mark, desired func(current map[string]policytable.Entry) map[string]*policytable.Entry) (policytable.SyncResult, error)
}

// TableSync makes the policy table in Redis equal to the valid policies,
// at start and every Interval: it removes entries whose policy is gone
// (deletion needs no finalizer) and restores the library and the table
// after FLUSHALL, a restart or a failover to an empty replica. It runs on
// the leader only.
type TableSync struct {
	Client   client.Reader
	Syncer   Syncer
	LastGood *LastGood
	Interval time.Duration
	// Memory, when set, reads the Redis masters' maxmemory-policy; it is
	// called at every sync. An allkeys-* policy may evict the policy
	// table (which has no TTL): logged once, a Warning event on every
	// policy, and sluice_redis_table_evictable.
	Memory func(ctx context.Context) ([]redisconn.MemoryPolicy, error)
	// Recorder, when set, records the Warning events: the eviction risk,
	// and a policy found missing from the table and written back.
	Recorder recorder.EventRecorder
	// Targets resolves the targetRefs of policies that have them (nil:
	// Gateway API is not installed, and no target is found).
	Targets *TargetResolver

	// checked is each policy's compile outcome by UID, for the generation
	// it was compiled at: a generation's spec never changes, so a policy
	// is compiled (CEL included) once per generation, not at every sync.
	mu      sync.Mutex
	checked map[types.UID]compileOutcome

	// stateMu guards what the syncs remember of each other.
	stateMu sync.Mutex
	// inTable holds the entries the last sync left in the table, by ID.
	inTable map[string]bool
	// memory is the last memory report logged ("" none yet), memoryErr
	// the last error reading it; warned is the report each policy got a
	// Warning event for.
	memory, memoryErr string
	warned            map[types.UID]string
}

type compileOutcome struct {
	generation int64
	err        error
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader writes to Redis.
func (s *TableSync) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (s *TableSync) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("table-sync")
	interval := s.Interval
	if interval <= 0 {
		interval = 3 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.SyncOnce(ctx); err != nil {
			log.Error(err, "policy table sync failed; retrying", "in", interval.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SyncOnce runs one sync.
func (s *TableSync) SyncOnce(ctx context.Context) error {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	// Reconciles keep writing while this sync lists and compiles: the
	// mark keeps what they write after the list from being undone.
	since := s.Syncer.Mark()
	var list ratelimitv1alpha1.RateLimitPolicyList
	// Read only, so the cache's own objects rather than copies of every
	// policy at every sync.
	if err := s.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	routes, err := s.resolveTargets(ctx, list.Items)
	if err != nil {
		return err
	}
	compileErrs := s.compileErrorsWithRoutes(list.Items, routes)
	risk := s.checkMemory(ctx, list.Items)
	var current map[string]policytable.Entry
	res, err := s.Syncer.Sync(ctx, since, func(cur map[string]policytable.Entry) map[string]*policytable.Entry {
		current = cur
		return desiredEntries(list.Items, routes, compileErrs, cur, s.LastGood)
	})
	if err != nil {
		return err
	}
	log := logf.FromContext(ctx)
	if res.Written > 0 || res.Removed > 0 {
		log.Info("policy table synced", "written", res.Written, "removed", res.Removed, "revision", res.Revision)
	}
	lost := lostEntries(s.inTable, current, res.Table)
	s.inTable = make(map[string]bool, len(res.Table))
	for id := range res.Table {
		s.inTable[id] = true
	}
	if len(lost) > 0 {
		s.restored(ctx, list.Items, lost, res.Revision, risk)
	}
	return nil
}

// lostEntries lists the entries the last sync left in the table (inTable)
// that are still wanted but no longer there: the table lost them (an
// eviction, FLUSHALL, a failover to an empty replica). Deletions are not
// losses: a deleted policy is no longer wanted.
func lostEntries(inTable map[string]bool, current map[string]policytable.Entry, want map[string]*policytable.Entry) []string {
	var lost []string
	for id := range want {
		if _, ok := current[id]; !ok && inTable[id] {
			lost = append(lost, id)
		}
	}
	return lost
}

// restored reports entries the sync wrote back after the table lost them.
func (s *TableSync) restored(ctx context.Context, items []ratelimitv1alpha1.RateLimitPolicy, lost []string, revision int64, risk string) {
	tableRestored.Add(float64(len(lost)))
	why := "evicted, flushed, or lost in a failover to an empty replica"
	if risk != "" {
		why = "probably evicted: " + risk
	}
	logf.FromContext(ctx).Error(nil, "policy table entries were missing in Redis; written back", "policies", len(lost), "revision", revision, "cause", why)
	if s.Recorder == nil {
		return
	}
	missing := make(map[string]bool, len(lost))
	for _, id := range lost {
		missing[id] = true
	}
	for i := range items {
		p := &items[i]
		if missing[p.Namespace+"/"+p.Name] {
			s.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonTableRestored, "Sync",
				"The policy table in Redis had lost this policy (%s); written back at table revision %d", why, revision)
		}
	}
}

// checkMemory reads the masters' eviction settings, logs a change once,
// and gives every policy one Warning event while a master may evict the
// table. It returns the risk ("" when none is known).
func (s *TableSync) checkMemory(ctx context.Context, items []ratelimitv1alpha1.RateLimitPolicy) string {
	if s.Memory == nil {
		return ""
	}
	log := logf.FromContext(ctx)
	masters, err := s.Memory(ctx)
	if err != nil {
		evictionUnsafe.Set(-1)
		msg := err.Error()
		if redisconn.IsPermissionDenied(err) {
			msg = "the controller's Redis user may not run INFO memory (grant it +info|memory): " + msg
		}
		if msg != s.memoryErr {
			s.memoryErr = msg
			log.Info("cannot read Redis's maxmemory-policy; the policy table's eviction risk is not checked", "err", msg)
		}
		return ""
	}
	s.memoryErr = ""
	var risky []string
	for _, m := range masters {
		if m.EvictsTable() {
			risky = append(risky, m.String())
		}
	}
	report := fmt.Sprint(masters)
	changed := report != s.memory
	s.memory = report
	if len(risky) == 0 {
		evictionUnsafe.Set(0)
		if changed {
			s.warned = nil
			log.Info("Redis cannot evict the policy table", "memory", report)
		}
		return ""
	}
	evictionUnsafe.Set(1)
	risk := strings.Join(risky, "; ")
	msg := risk + ": when Redis is full it may evict the policy table (which has no TTL; the table sync writes it back every sync interval, and meanwhile a check process that starts or reloads may miss policies) " +
		"and rate-limit counters (their limits start over). Use noeviction (checks are answered by their failureMode when Redis is full) or a volatile-* policy (volatile-ttl evicts the counters nearest their expiry first)"
	if changed {
		log.Error(nil, "Redis may evict the policy table", "risk", msg)
		s.warned = nil
	}
	if s.Recorder != nil {
		if s.warned == nil {
			s.warned = map[types.UID]string{}
		}
		seen := make(map[types.UID]string, len(items))
		for i := range items {
			p := &items[i]
			if s.warned[p.UID] != report {
				s.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonEvictionRisk, "Sync", "%s", msg)
			}
			seen[p.UID] = report
		}
		s.warned = seen
	}
	return risk
}

// compileErrors is each listed policy's compile error (nil: it compiles),
// compiling only the generations not seen before; policies no longer
// listed are forgotten.
func (s *TableSync) compileErrors(items []ratelimitv1alpha1.RateLimitPolicy) []error {
	return s.compileErrorsWithRoutes(items, nil)
}

// resolveTargets resolves the targetRefs of the policies that have them,
// by UID: the routes of their targets change without their generation.
func (s *TableSync) resolveTargets(ctx context.Context, items []ratelimitv1alpha1.RateLimitPolicy) (map[types.UID]*policy.Routes, error) {
	var out map[types.UID]*policy.Routes
	for i := range items {
		p := &items[i]
		if len(p.Spec.TargetRefs) == 0 {
			continue
		}
		if out == nil {
			out = map[types.UID]*policy.Routes{}
		}
		if s.Targets == nil {
			out[p.UID] = &policy.Routes{}
			continue
		}
		res, err := s.Targets.Resolve(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("resolve the targetRefs of %s/%s: %w", p.Namespace, p.Name, err)
		}
		out[p.UID] = res.Routes
	}
	return out, nil
}

// compileErrorsWithRoutes is compileErrors for policies whose targets
// resolved to routes: those compile at every sync.
func (s *TableSync) compileErrorsWithRoutes(items []ratelimitv1alpha1.RateLimitPolicy, routes map[types.UID]*policy.Routes) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[types.UID]compileOutcome, len(items))
	errs := make([]error, len(items))
	for i := range items {
		p := &items[i]
		o, ok := s.checked[p.UID]
		if r, targeted := routes[p.UID]; targeted {
			_, err := policy.CompileTargeted(p.Namespace, p.Name, &p.Spec, r)
			o = compileOutcome{generation: p.Generation, err: err}
		} else if !ok || o.generation != p.Generation {
			_, err := policy.Compile(p.Namespace, p.Name, &p.Spec)
			o = compileOutcome{generation: p.Generation, err: err}
		}
		seen[p.UID], errs[i] = o, o.err
	}
	s.checked = seen
	return errs
}

// desiredEntries is the table the cluster's policies call for: the version
// of each policy in force (its current spec when it compiles, compileErrs
// being the listed policies' compile errors, else its last good version),
// or, for an invalid policy this process has no last good version of (it
// has just started), the entry already in the table.
func desiredEntries(items []ratelimitv1alpha1.RateLimitPolicy, routes map[types.UID]*policy.Routes, compileErrs []error, current map[string]policytable.Entry, lastGood *LastGood) map[string]*policytable.Entry {
	want := make(map[string]*policytable.Entry, len(items))
	for i := range items {
		p := &items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		spec := policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, Spec: p.Spec, Routes: routes[p.UID]}
		e, ok := lastGood.InForce(types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, spec, compileErrs[i])
		if !ok {
			if e, ok = current[spec.ID()]; !ok {
				continue
			}
		}
		want[e.ID()] = &e
	}
	return want
}
