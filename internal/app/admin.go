package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// adminPollInterval is how often the admin API's copy of the policy table
// and of the overrides polls their revisions (their change messages are
// the fast path), as the check processes' default does.
const adminPollInterval = 500 * time.Millisecond

// adminAPI is the admin API a controller replica serves behind its front:
// a checker of its own over the policy table and the counters in Redis
// (explain, inspect, reset, bans, lift), the overrides kept there, and the
// top key values every check process publishes. It decides nothing for
// traffic; its resets and lifts reach the check processes as refunds do.
type adminAPI struct {
	reader         *policytable.Reader
	refunds        *policytable.Refunds
	overrides      *overrides.Index
	overridesStore overrides.Store
	stack          *checkstack.Stack
	handler        *admin.Handler
}

func newAdminAPI(parts *redisParts, log *slog.Logger) *adminAPI {
	a := &adminAPI{
		reader:         policytable.NewReader(parts.table, adminPollInterval, log),
		refunds:        policytable.NewRefunds(parts.Client, log),
		overrides:      overrides.NewIndex(log),
		overridesStore: overrides.NewRedisStore(parts.Client, adminPollInterval),
	}
	a.reader.FollowRefunds(a.refunds)
	a.stack = checkstack.New(checkstack.Options{Source: a.reader, Overrides: a.overrides, Redis: parts.Store, Refunds: a.refunds, Logger: log})
	runtime := &overrides.Runtime{Store: overrides.NewRedisStore(parts.Client, 0), Policy: overrides.PolicyInTable(parts.table), Log: log}
	a.handler = admin.New(admin.Options{Checker: a.stack.Checker, Overrides: runtime, Top: topkeys.NewReader(parts.Client, nil), Logger: log})
	return a
}

// Start follows the table, the overrides and the refunds' channel until
// ctx ends, on every replica.
func (a *adminAPI) Start(ctx context.Context) error {
	defer a.stack.Close()
	go a.reader.Run(ctx)
	go a.overrides.Follow(ctx, a.overridesStore)
	a.refunds.Run(ctx)
	return nil
}

// NeedLeaderElection: every replica serves the admin API.
func (a *adminAPI) NeedLeaderElection() bool { return false }
