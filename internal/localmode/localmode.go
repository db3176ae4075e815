// Package localmode runs Sluice without a cluster: policies from YAML files
// in a folder, the in-memory store (or Redis), and the check endpoint.
package localmode

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

// DefaultListen is where local mode serves unless told: loopback only, as
// it has no authentication and its dashboard edits policies. Exposing it
// is a deliberate --listen (:8080, or an interface's address).
const DefaultListen = "127.0.0.1:8080"

// Config is local mode's settings.
type Config struct {
	// Config is the check process's (Listen defaults to DefaultListen;
	// PollInterval is also how often the folder is checked for edits).
	checkserver.Config
	PoliciesDir string
	Redis       redisconn.Config
	// MemoryMaxKeys caps the buckets of the in-memory store (0: no cap);
	// when it is full, a check that needs a new bucket evicts the least
	// recently used one.
	MemoryMaxKeys int
	// AdminListen, when set, is the admin API's address: on loopback
	// (admin.CheckLocalListen), as it has no authentication.
	AdminListen string
}

// BindFlags binds local mode's flags to fs; FinishFlags reads them once
// fs is parsed.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Config.BindFlags(fs, checkserver.FlagUsage{
		Listen: DefaultListen, ListenHelp: "address of the check endpoint and the dashboard; loopback by default, as nothing here is authenticated (:8080 or 0.0.0.0:8080 serves every interface)",
		PollIntervalHelp: "how often the policies folder is checked for edits",
	})
	fs.StringVar(&c.PoliciesDir, "policies", "config/samples", "folder of RateLimitPolicy YAML files, watched for edits")
	fs.IntVar(&c.MemoryMaxKeys, "memory-max-keys", memstore.DefaultMaxKeys, "most buckets (a key value of a policy) the in-memory store holds (about 250 B each with one limit); when it is full, a new bucket evicts the least recently used, which starts afresh (0: no cap)")
	fs.StringVar(&c.AdminListen, "admin-listen", "", "serve the admin API (explain, inspect, reset, bans, lift) on this loopback address, such as 127.0.0.1:8081; off when empty. Nothing on it is authenticated, so other addresses are refused")
	c.Redis.BindFlags(fs)
}

// App is local mode assembled: the policy files, the checker stack and
// the check endpoints, with the dashboard at / (see internal/dashboard).
type App struct {
	Files *policyfiles.Folder
	// Overrides sets, lists and deletes the run-time overrides (the
	// admin API's), kept in Redis with --redis-url, else in memory.
	Overrides *overrides.Runtime
	// overrides are the ones in force, following the store: follow keeps
	// them current (the memory store's changes, or Redis's through a
	// fleet.Follower).
	overrides      *overrides.Index
	overridesStore overrides.Store
	follow         func(context.Context)
	// declared are the policies the files declared overrides of, last
	// time they were read.
	declared map[overrides.PolicyID]bool
	server   *checkserver.Server
	// Admin is the admin API's handler: the dashboard's operations go
	// through it, and it is served on an address of its own when
	// cfg.AdminListen (adminAddr) is set.
	Admin     *admin.Handler
	adminAddr string
	closers   []func()
	log       *slog.Logger
	storeName string
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
	if cfg.AdminListen != "" {
		if err := admin.CheckLocalListen(cfg.AdminListen, cfg.Listen, cfg.GRPC.Listen); err != nil {
			return nil, err
		}
	}
	files, err := policyfiles.NewFolder(cfg.PoliciesDir, cfg.PollInterval, log)
	if err != nil {
		return nil, err
	}
	memory := overrides.NewMemoryStore()
	a := &App{Files: files, log: log, storeName: "memory", overrides: overrides.NewIndex(log), overridesStore: memory}
	a.follow = func(ctx context.Context) { a.overrides.Follow(ctx, memory) }

	var redisStore *redisstore.Store
	if cfg.Redis.Enabled() {
		conn, err := cfg.Redis.Connect(redisstore.Options{})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, conn.Close)
		loadCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := conn.Store.Load(loadCtx); err != nil {
			// Not fatal: the failure modes answer until Redis is reachable,
			// and the store loads the library on its first call.
			log.Warn("Redis not reachable at start; failure modes apply until it is", "err", err)
		}
		cancel()
		redisStore, a.storeName = conn.Store, "redis"
		store := overrides.NewRedisStore(conn.Client)
		follower := fleet.NewFollower(conn.Client, cfg.PollInterval, log)
		follower.Follow(overrides.RedisChannel, overrides.NewTracker(a.overrides, store))
		a.overridesStore, a.follow = store, follower.Run
	}
	a.Overrides = &overrides.Runtime{Store: a.overridesStore, Policy: overrides.PolicyOf(files.Policies), Log: log}
	a.applyDeclared()
	files.OnChange(a.applyDeclared)
	decisions, err := decisionlog.Open(cfg.DecisionLog)
	if err != nil {
		a.Close()
		return nil, err
	}
	stack := checkstack.New(checkstack.Options{Source: files, Overrides: a.overrides, Redis: redisStore, MemoryMaxKeys: cfg.MemoryMaxKeys, Timeout: cfg.Timeout, OwnRegistry: true, OwnTraces: true, DecisionLog: decisions, TopKeys: true, Logger: log})
	// Closed before the Redis store: the units the leases hold go back first.
	a.closers = append([]func(){func() { _ = stack.Close() }}, a.closers...)

	a.Admin = admin.New(admin.Options{Checker: stack.Checker, Overrides: a.Overrides, Top: stack.Top, Logger: log})
	a.adminAddr = cfg.AdminListen
	a.server, err = checkserver.New(checkserver.Options{Config: cfg.Config, Stack: stack, Files: files, Admin: a.Admin})
	if err != nil {
		a.Close()
		return nil, err
	}
	if a.server.GRPC != nil {
		a.Admin.ShowQuota(a.server.GRPC.Quota())
	}
	return a, nil
}

// applyDeclared writes the entries of the folder's RateLimitOverrides
// files to the store as the controller does for the objects of a cluster,
// policy by policy, and logs the entries that do not apply.
func (a *App) applyDeclared() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	byPolicy := map[overrides.PolicyID][]*ratelimitv1alpha1.RateLimitOverrides{}
	for _, o := range a.Files.Overrides() {
		id := overrides.PolicyID{Namespace: o.Namespace, Name: o.Spec.PolicyName}
		byPolicy[id] = append(byPolicy[id], o)
	}
	set, now := a.Files.Policies(), time.Now()
	for id := range a.declared {
		if byPolicy[id] == nil {
			byPolicy[id] = nil // the files no longer declare any: removed
		}
	}
	a.declared = map[overrides.PolicyID]bool{}
	for id, objects := range byPolicy {
		var valid map[string]overrides.Entry
		if p := set.Get(id.Namespace, id.Name); p != nil {
			var ok bool
			if valid, ok = a.declare(ctx, id, p, objects, now); !ok {
				continue
			}
		} else if len(objects) > 0 {
			a.log.Warn("RateLimitOverrides name a policy that does not exist; their entries apply once it does", "policy", id.String())
		}
		if err := a.overridesStore.ReplaceDeclared(ctx, id, valid); err != nil {
			a.log.Warn("cannot write the declared overrides", "policy", id.String(), "err", err)
		}
		if len(objects) > 0 {
			a.declared[id] = true
		}
	}
}

// declare checks the objects of policy id as the controller does
// (overrides.DeclareKeepingLastGood) and logs what does not apply: an
// object with an entry that cannot work applies none of its new entries,
// and those it had in force stay. ok false: the entries in force could
// not be read, and nothing is written.
func (a *App) declare(ctx context.Context, id overrides.PolicyID, p *policy.Policy, objects []*ratelimitv1alpha1.RateLimitOverrides, now time.Time) (map[string]overrides.Entry, bool) {
	d, err := overrides.DeclareKeepingLastGood(p, objects, now, func() (map[string]overrides.Entry, error) {
		inForce, err := a.overridesStore.LoadPolicy(ctx, id)
		return inForce.Declared, err
	})
	if err != nil {
		a.log.Warn("cannot read the declared overrides in force", "policy", id.String(), "err", err)
		return nil, false
	}
	for object, invalid := range d.Invalid {
		for _, bad := range invalid {
			a.log.Warn("override entry not applied", "object", id.Namespace+"/"+object, "index", bad.Index, "key", bad.Key, "field", bad.Field, "err", bad.Message)
		}
		if d.Stalled[object] {
			a.log.Warn("RateLimitOverrides not applied: an entry cannot work as written; the entries it had in force stay",
				"object", id.Namespace+"/"+object, "field", invalid[0].Field, "kept", d.Kept[object])
		}
	}
	return d.Entries, true
}

// Close gives back what the leases hold and releases the store and the
// Redis client.
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

// ServeWithGRPC is Serve, with the gRPC endpoint (cfg.GRPC) on grpcLn
// beside the HTTP one; grpcLn nil serves HTTP only.
func (a *App) ServeWithGRPC(ctx context.Context, ln, grpcLn net.Listener) error {
	go a.Files.Run(ctx)
	go a.follow(ctx)
	a.log.Info("local mode serving", "addr", ln.Addr().String(), "policies", a.Files.Dir(), "store", a.storeName)
	return a.server.Serve(ctx, ln, grpcLn)
}

// ServeAdmin serves the admin API on ln until ctx ends; every call is
// made by admin.LocalCaller.
func (a *App) ServeAdmin(ctx context.Context, ln net.Listener) error {
	a.log.Info("admin API serving, without authentication", "addr", ln.Addr().String(), "base", admin.Base)
	return admin.ServeLocal(ctx, ln, a.Admin)
}

// Run assembles local mode, listens on cfg.Listen (and cfg.GRPC.Listen,
// cfg.AdminListen) and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, grpcLn, err := a.server.Listen()
	if err != nil {
		return err
	}
	if a.adminAddr == "" {
		return a.ServeWithGRPC(ctx, ln, grpcLn)
	}
	adminLn, err := net.Listen("tcp", a.adminAddr)
	if err != nil {
		_ = ln.Close()
		if grpcLn != nil {
			_ = grpcLn.Close()
		}
		return fmt.Errorf("--admin-listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminDone := make(chan error, 1)
	go func() { adminDone <- a.ServeAdmin(ctx, adminLn) }()
	err = a.ServeWithGRPC(ctx, ln, grpcLn)
	cancel()
	return errors.Join(err, <-adminDone)
}
