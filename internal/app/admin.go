package app

import (
	"context"
	"log/slog"

	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// adminPollInterval is how often the controller's copy of the policy
// table and of the overrides polls their revisions (their change messages
// are the fast path), as the check processes' default does. In `manager
// all` the admin API shares the check server's copy and its interval.
const adminPollInterval = fleet.DefaultPoll

// adminAPI is the admin API a controller replica serves behind its front:
// a checker of its own over the policy table and the counters in Redis
// (explain, inspect, reset, bans, lift), the overrides kept there, and the
// top key values every check process publishes. It decides nothing for
// traffic; its resets and lifts reach the check processes as refunds do.
type adminAPI struct {
	view *fleetView
	// follow: this API made view (a controller process), and runs its
	// follower; in `manager all` the check server does.
	follow    bool
	announcer *fleet.Announcer
	stack     *checkstack.Stack
	handler   *admin.Handler
}

func newAdminAPI(parts *redisParts, log *slog.Logger) *adminAPI {
	a := &adminAPI{}
	a.view, a.follow = parts.fleetView(adminPollInterval, log)
	a.announcer = a.view.announcer(parts, log)
	a.stack = checkstack.New(checkstack.Options{Source: a.view.reader, Overrides: a.view.overrides, Redis: parts.Store, Announcer: a.announcer, Logger: log})
	runtime := &overrides.Runtime{Store: overrides.NewRedisStore(parts.Client), Policy: overrides.PolicyInTable(parts.table), Log: log}
	a.handler = admin.New(admin.Options{Checker: a.stack.Checker, Overrides: runtime, Top: topkeys.NewReader(parts.Client, nil), Quota: parts.quota, Logger: log})
	return a
}

// Start follows the table, the overrides and the announcements until ctx
// ends, on every replica.
func (a *adminAPI) Start(ctx context.Context) error {
	defer a.stack.Close()
	if a.follow {
		go a.view.follower.Run(ctx)
	}
	a.announcer.Run(ctx)
	return nil
}

// NeedLeaderElection: every replica serves the admin API.
func (a *adminAPI) NeedLeaderElection() bool { return false }
