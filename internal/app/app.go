// Package app assembles Sluice's cluster processes from their parts: the
// controller (reconciler and table sync, leader-elected) and the check
// endpoint (Redis only, no Kubernetes access), or both in one process.
package app

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

// CheckConfig configures the check endpoint process.
type CheckConfig struct {
	checkserver.Config
	// NoLibraryLoad: never load the rate-limit library (the Redis user may
	// not load code); while it is missing, checks get the failure mode
	// until the controller restores it.
	NoLibraryLoad bool
}

// BindFlags binds the check process's flags to fs; FinishFlags reads them
// once fs is parsed.
func (c *CheckConfig) BindFlags(fs *flag.FlagSet) {
	c.Config.BindFlags(fs, checkserver.FlagUsage{
		Listen: ":8080", ListenHelp: "address of the check endpoint, its /metrics and probes",
		PollIntervalHelp: "how often the policy-table revision is polled (pub/sub is the fast path)",
	})
	fs.BoolFunc("redis-load-library", "load the rate-limit library into Redis when a check finds it missing (default true); false when the Redis user may not load code (config/redis/users.acl): the controller restores it", func(s string) error {
		load, err := strconv.ParseBool(s)
		c.NoLibraryLoad = !load
		return err
	})
}

// redisParts is what both processes build from the Redis settings.
type redisParts struct {
	*redisconn.Conn
	table *policytable.Table
	// view is the process's one follower of the fleet's state, made by
	// its first user (fleetView).
	view *fleetView
	// quota is the rate limit quota service of the process's check
	// server (`manager all`), whose assignments its admin API shows; nil
	// when it has none.
	quota admin.QuotaShares
}

func connectRedis(cfg *redisconn.Config, storeOpts redisstore.Options) (*redisParts, error) {
	if !cfg.Enabled() {
		return nil, errors.New("redis: no connection configured; set --redis-url, --redis-sentinel-addrs or --redis-cluster-addrs")
	}
	conn, err := cfg.Connect(storeOpts)
	if err != nil {
		return nil, err
	}
	return &redisParts{Conn: conn, table: policytable.New(conn.Client)}, nil
}

// fleetView is the process's copy of the state the fleet shares in Redis,
// the policy table and the overrides of key values, and the announcements
// of refunds and lifts of its checkers, all followed over one
// subscription (fleet.Follower). The check server and, in `manager all`,
// the admin API share it.
type fleetView struct {
	follower  *fleet.Follower
	reader    *policytable.Reader
	overrides *overrides.Index
}

// fleetView returns the process's view; made is true when this call made
// it, and its caller runs the follower (after every user has called
// announcer).
func (p *redisParts) fleetView(poll time.Duration, log *slog.Logger) (v *fleetView, made bool) {
	if p.view != nil {
		return p.view, false
	}
	v = &fleetView{follower: fleet.NewFollower(p.Client, poll, log), reader: policytable.NewReader(p.table, log), overrides: overrides.NewIndex(log)}
	v.follower.Follow(policytable.Channel, v.reader)
	v.follower.Follow(overrides.RedisChannel, overrides.NewTracker(v.overrides, overrides.NewRedisStore(p.Client)))
	p.view = v
	return v, true
}

// announcer returns an announcer of a checker's refunds and lifts (Envoy's
// negative hits, a lease's unused units, the admin API's resets and
// lifts), told to the other check processes on the table's channel so
// none keeps denying a bucket that has room again; the view's follower
// hands it theirs.
func (v *fleetView) announcer(p *redisParts, log *slog.Logger) *fleet.Announcer {
	a := fleet.NewAnnouncer(p.Client, policytable.Channel, log)
	v.follower.Follow(policytable.Channel, a)
	return a
}

// checkServer is the check endpoint over Redis, following the policy table.
type checkServer struct {
	view *fleetView
	// follow: this server made view, and runs its follower.
	follow    bool
	announcer *fleet.Announcer
	// stack gives back what its leases hold once serving has ended,
	// before the Redis client closes.
	stack  *checkstack.Stack
	server *checkserver.Server
	log    *slog.Logger
}

func newCheckServer(cfg CheckConfig, parts *redisParts) (*checkServer, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	view, follow := parts.fleetView(cfg.PollInterval, log)
	announcer := view.announcer(parts, log)
	decisions, err := decisionlog.Open(cfg.DecisionLog)
	if err != nil {
		return nil, err
	}
	stack := checkstack.New(checkstack.Options{Source: view.reader, Overrides: view.overrides, Redis: parts.Store, Timeout: cfg.Timeout, OwnRegistry: true, OwnTraces: true, Announcer: announcer, DecisionLog: decisions, TopKeys: true, Logger: log})
	server, err := checkserver.New(checkserver.Options{Config: cfg.Config, Stack: stack, Table: view.reader})
	if err != nil {
		_ = stack.Close()
		return nil, err
	}
	return &checkServer{view: view, follow: follow, announcer: announcer, stack: stack, server: server, log: log}, nil
}

// run serves until ctx ends, then drains connections and gives back the
// units of this process's leases.
func (c *checkServer) run(ctx context.Context) error {
	defer c.stack.Close()
	ln, grpcLn, err := c.server.Listen()
	if err != nil {
		return err
	}
	// The table is followed until the drain is over, not only until ctx
	// ends: a draining process still answers its keep-alive clients, and
	// must enforce what was applied meanwhile, as the other replicas do.
	readCtx, stopReading := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReading()
	if c.follow {
		go c.view.follower.Run(readCtx)
	}
	go c.announcer.Run(ctx)
	c.log.Info("check endpoint serving", "addr", ln.Addr().String())
	return c.server.Serve(ctx, ln, grpcLn)
}

// RunCheck runs the check endpoint process until ctx ends.
func RunCheck(ctx context.Context, cfg CheckConfig, redisCfg *redisconn.Config) error {
	parts, err := connectRedis(redisCfg, redisstore.Options{NoLoad: cfg.NoLibraryLoad})
	if err != nil {
		return err
	}
	defer parts.Close()
	srv, err := newCheckServer(cfg, parts)
	if err != nil {
		return err
	}
	return srv.run(ctx)
}
