package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
)

// Syncer is the Redis side of the table sync.
type Syncer interface {
	Sync(ctx context.Context, desired func(current map[string]policytable.Entry) map[string]*policytable.Entry) (policytable.SyncResult, error)
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

	// checked is each policy's compile outcome by UID, for the generation
	// it was compiled at: a generation's spec never changes, so a policy
	// is compiled (CEL included) once per generation, not at every sync.
	mu      sync.Mutex
	checked map[types.UID]compileOutcome
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
	var list ratelimitv1alpha1.RateLimitPolicyList
	if err := s.Client.List(ctx, &list); err != nil {
		return err
	}
	compileErrs := s.compileErrors(list.Items)
	res, err := s.Syncer.Sync(ctx, func(current map[string]policytable.Entry) map[string]*policytable.Entry {
		return desiredEntries(list.Items, compileErrs, current, s.LastGood)
	})
	if err != nil {
		return err
	}
	if res.Written > 0 || res.Removed > 0 {
		logf.FromContext(ctx).Info("policy table synced", "written", res.Written, "removed", res.Removed, "revision", res.Revision)
	}
	return nil
}

// compileErrors is each listed policy's compile error (nil: it compiles),
// compiling only the generations not seen before; policies no longer
// listed are forgotten.
func (s *TableSync) compileErrors(items []ratelimitv1alpha1.RateLimitPolicy) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[types.UID]compileOutcome, len(items))
	errs := make([]error, len(items))
	for i := range items {
		p := &items[i]
		o, ok := s.checked[p.UID]
		if !ok || o.generation != p.Generation {
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
func desiredEntries(items []ratelimitv1alpha1.RateLimitPolicy, compileErrs []error, current map[string]policytable.Entry, lastGood *LastGood) map[string]*policytable.Entry {
	want := make(map[string]*policytable.Entry, len(items))
	for i := range items {
		p := &items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		spec := policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, Spec: p.Spec}
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
