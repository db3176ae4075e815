// Package localmode runs Sluice without a cluster: policies from YAML files
// in a folder, the in-memory store (or Redis), and the check endpoint.
package localmode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/webhook"
)

// DefaultListen is where local mode serves unless told: loopback only, as
// it has no authentication and its dashboard edits policies. Exposing it
// is a deliberate --listen (:8080, or an interface's address).
const DefaultListen = "127.0.0.1:8080"

// Config is local mode's settings.
type Config struct {
	PoliciesDir string
	// Listen is the HTTP endpoint's address (default DefaultListen).
	Listen string
	// DashboardHosts are the names, besides localhost, IP addresses and
	// the Listen host, that the dashboard is served as.
	DashboardHosts dashboard.Hosts
	Redis          redisconn.Config
	Profile        webhook.Profile
	TrustedProxies []string
	// Timeout bounds each Redis call (the failure mode answers after it).
	Timeout time.Duration
	// PollInterval is how often the folder is checked for edits.
	PollInterval time.Duration
	// MemoryMaxKeys caps the buckets of the in-memory store (0: no cap);
	// when it is full, a check that needs a new bucket evicts the least
	// recently used one.
	MemoryMaxKeys int
	// HTTP bounds the endpoint's client connections.
	HTTP httpserve.Config
	// GRPC is the gRPC endpoint (ext_authz), off unless GRPC.Listen is set.
	GRPC   grpcserver.Config
	Logger *slog.Logger
}

// App is local mode assembled: the policy files, the store, the checker
// and the check endpoint, with the dashboard at / (see internal/dashboard).
type App struct {
	Files   *policyfiles.Folder
	Checker *check.Checker
	Handler *webhook.CheckEndpoint
	// GRPC is the gRPC endpoint; nil when cfg.GRPC is off.
	GRPC      *grpcserver.Server
	store     ratelimit.Store
	closers   []func()
	log       *slog.Logger
	storeName string
	http      httpserve.Config
	listen    string
}

// New assembles local mode from cfg.
func New(ctx context.Context, cfg Config) (*App, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	a := &App{log: log, http: cfg.HTTP, listen: cfg.Listen}
	a.http.Logger = log
	a.http.Budget = cfg.GRPC.Budget(cfg.HTTP, log)
	files, err := policyfiles.NewFolder(cfg.PoliciesDir, cfg.PollInterval, log)
	if err != nil {
		return nil, err
	}
	a.Files = files

	if cfg.Redis.Enabled() {
		opts, err := cfg.Redis.Options()
		if err != nil {
			return nil, err
		}
		client := redisstore.NewClient(opts)
		a.closers = append(a.closers, func() { _ = client.Close() })
		rs, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			a.Close()
			return nil, err
		}
		loadCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := rs.Load(loadCtx); err != nil {
			// Not fatal: the failure modes answer until Redis is reachable,
			// and the store loads the library on its first call.
			log.Warn("Redis not reachable at start; failure modes apply until it is", "err", err)
		}
		cancel()
		a.store, a.storeName = rs, "redis"
	} else {
		a.store, a.storeName = memstore.New(memstore.WithMaxKeys(cfg.MemoryMaxKeys)), "memory"
	}
	a.closers = append([]func(){func() { _ = a.store.Close() }}, a.closers...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	checkStore := a.store
	if a.storeName == "redis" {
		// Leases only for Redis: the memory store is this process's own
		// and answers from memory already, exactly.
		leases := lease.New(a.store, lease.Options{})
		checkStore = leases
		// Closed before the store: the units it holds go back first.
		a.closers = append([]func(){func() { _ = leases.Close() }}, a.closers...)
	}
	a.Checker = check.New(check.Options{Store: checkStore, Source: files, Timeout: cfg.Timeout, Metrics: check.NewMetrics(reg), Logger: log})
	a.http.Registerer = reg

	var trusted *clientip.TrustedProxies
	if cfg.TrustedProxies != nil {
		if trusted, err = clientip.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
			a.Close()
			return nil, fmt.Errorf("--trusted-proxies: %w", err)
		}
	}
	a.Handler, err = webhook.New(webhook.Options{Checker: a.Checker, Profile: cfg.Profile, TrustedProxies: trusted, Gatherer: reg, Logger: log})
	if err != nil {
		a.Close()
		return nil, err
	}
	dash, err := dashboard.New(dashboard.Options{Checker: a.Checker, Files: files, Listen: cfg.Listen, Hosts: cfg.DashboardHosts})
	if err != nil {
		a.Close()
		return nil, err
	}
	dash.Register(a.Handler)
	if cfg.GRPC.Enabled() {
		a.GRPC, err = grpcserver.FromConfig(&cfg.GRPC, grpcserver.Options{Checker: a.Checker, TrustedProxies: trusted, Budget: a.http.Budget, Registerer: reg, Logger: log})
		if err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// Close releases the store and the Redis client.
func (a *App) Close() {
	for _, c := range a.closers {
		c()
	}
}

// Serve follows the policy folder and serves the HTTP endpoint on ln
// until ctx ends, then shuts down gracefully.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	return a.ServeWithGRPC(ctx, ln, nil)
}

// ServeWithGRPC is Serve, with the gRPC endpoint (a.GRPC) on grpcLn beside
// the HTTP one; grpcLn nil serves HTTP only.
func (a *App) ServeWithGRPC(ctx context.Context, ln, grpcLn net.Listener) error {
	go a.Files.Run(ctx)
	a.log.Info("local mode serving", "addr", ln.Addr().String(), "policies", a.Files.Dir(), "store", a.storeName)
	grpcSrv := a.GRPC
	if grpcLn == nil {
		grpcSrv = nil
	}
	return grpcSrv.ServeBeside(ctx, grpcLn, func(ctx context.Context) error { return a.http.Serve(ctx, ln, a.Handler) })
}

// Run assembles local mode, listens on cfg.Listen and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", a.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var grpcLn net.Listener
	if a.GRPC != nil {
		if grpcLn, err = net.Listen("tcp", cfg.GRPC.Listen); err != nil {
			_ = ln.Close()
			return fmt.Errorf("--grpc-listen: %w", err)
		}
	}
	return a.ServeWithGRPC(ctx, ln, grpcLn)
}
