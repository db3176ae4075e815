// Package app assembles Sluice's cluster processes from their parts: the
// controller (reconciler and table sync, leader-elected) and the check
// endpoint (Redis only, no Kubernetes access), or both in one process.
package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/webhook"
)

// CheckConfig configures the check endpoint process.
type CheckConfig struct {
	Listen string
	// DashboardHosts are the names, besides localhost, IP addresses and
	// the Listen host, that the read-only dashboard is served as (a
	// Service or Ingress name; kubectl port-forward is localhost).
	DashboardHosts dashboard.Hosts
	Profile        webhook.Profile
	TrustedProxies []string
	// ReportPolicy: see checkserver.Options.
	ReportPolicy bool
	// DecisionLog is where each denial is logged (off by default).
	DecisionLog decisionlog.Config
	// Timeout bounds each Redis call.
	Timeout time.Duration
	// PollInterval is the policy-table revision poll (the fallback to pub/sub).
	PollInterval time.Duration
	// NoLibraryLoad: never load the rate-limit library (the Redis user may
	// not load code); while it is missing, checks get the failure mode
	// until the controller restores it.
	NoLibraryLoad bool
	// HTTP bounds the endpoint's client connections.
	HTTP httpserve.Config
	// GRPC is the gRPC endpoint (ext_authz), off unless GRPC.Listen is set.
	GRPC   grpcserver.Config
	Logger *slog.Logger
}

// redisParts is what both processes build from the Redis settings.
type redisParts struct {
	*redisconn.Conn
	table *policytable.Table
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

// checkServer is the check endpoint over Redis, following the policy table.
type checkServer struct {
	reader  *policytable.Reader
	refunds *policytable.Refunds
	// overrides follow overridesStore, as reader follows the table.
	overrides      *overrides.Index
	overridesStore overrides.Store
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
	reader := policytable.NewReader(parts.table, cfg.PollInterval, log)
	// Refunds (Envoy's negative hits, a lease's unused units) are told to
	// the other check processes on the table's channel, so none keeps
	// denying a bucket a refund gave room.
	refunds := policytable.NewRefunds(parts.Client, log)
	reader.FollowRefunds(refunds)
	// Overrides of key values (run time and declared) are followed in
	// Redis as the policy table is.
	index := overrides.NewIndex(log)
	decisions, err := decisionlog.Open(cfg.DecisionLog)
	if err != nil {
		return nil, err
	}
	stack := checkstack.New(checkstack.Options{Source: reader, Overrides: index, Redis: parts.Store, Timeout: cfg.Timeout, OwnRegistry: true, OwnTraces: true, Refunds: refunds, DecisionLog: decisions, TopKeys: true, Logger: log})
	server, err := checkserver.New(checkserver.Options{
		Stack: stack, Listen: cfg.Listen, DashboardHosts: cfg.DashboardHosts, Table: reader,
		Profile: cfg.Profile, TrustedProxies: cfg.TrustedProxies, ReportPolicy: cfg.ReportPolicy, HTTP: cfg.HTTP, GRPC: cfg.GRPC, Logger: log,
	})
	if err != nil {
		_ = stack.Close()
		return nil, err
	}
	return &checkServer{reader: reader, refunds: refunds, overrides: index, overridesStore: overrides.NewRedisStore(parts.Client, cfg.PollInterval),
		stack: stack, server: server, log: log}, nil
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
	go c.reader.Run(readCtx)
	go c.overrides.Follow(readCtx, c.overridesStore)
	go c.refunds.Run(ctx)
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
