package controller

import (
	"context"
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
	res, err := s.Syncer.Sync(ctx, func(current map[string]policytable.Entry) map[string]*policytable.Entry {
		return desiredEntries(list.Items, current, s.LastGood)
	})
	if err != nil {
		return err
	}
	if res.Written > 0 || res.Removed > 0 {
		logf.FromContext(ctx).Info("policy table synced", "written", res.Written, "removed", res.Removed, "revision", res.Revision)
	}
	return nil
}

// desiredEntries is the table the cluster's policies call for: each valid
// policy's current spec, and for an invalid one its last good version
// (remembered by the reconciler, or already in the table).
func desiredEntries(items []ratelimitv1alpha1.RateLimitPolicy, current map[string]policytable.Entry, lastGood *LastGood) map[string]*policytable.Entry {
	want := make(map[string]*policytable.Entry, len(items))
	for i := range items {
		p := &items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		e := &policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, Spec: p.Spec}
		if _, err := policy.Compile(p.Namespace, p.Name, &p.Spec); err != nil {
			if good, ok := lastGood.Get(types.NamespacedName{Namespace: p.Namespace, Name: p.Name}); ok {
				e = &good
			} else if cur, ok := current[e.ID()]; ok {
				e = &cur
			} else {
				continue
			}
		}
		want[e.ID()] = e
	}
	return want
}
